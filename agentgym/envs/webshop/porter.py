"""Lucene's ``PorterStemmer`` (Martin Porter's reference C implementation), in pure Python.

Lucene's ``PorterStemFilter`` — the last stage of Anserini's ``DefaultEnglishAnalyzer``, which WebShop's pyserini
index uses — is a port of Porter's own C code, which differs from the 1980 paper in a few rules (``bli -> ble``
instead of ``abli -> able``, the extra ``logi -> log``, words of at most two letters untouched). NLTK calls this
``MARTIN_EXTENSIONS``; PyStemmer's ``porter`` and NLTK's ``ORIGINAL_ALGORITHM`` are *not* it. Only the exact
algorithm reproduces the index's terms, so it is written out here step by step, keeping the C names
(``cons``, ``m``, ``ends``, ``setto``, ``r``) to make the correspondence checkable.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["stem"]


class _Stemmer:
    __slots__ = ("b", "k", "j")

    def __init__(self, word: str):
        self.b = list(word)
        self.k = len(word) - 1
        self.j = 0

    def cons(self, i: int) -> bool:
        ch = self.b[i]
        if ch in "aeiou":
            return False
        if ch == "y":
            return True if i == 0 else not self.cons(i - 1)
        return True

    def m(self) -> int:
        """The number of consonant-vowel sequences in b[0..j]."""
        n, i, j = 0, 0, self.j
        while True:
            if i > j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowelinstem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def doublec(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, s: str) -> bool:
        n = len(s)
        o = self.k - n + 1
        if o < 0 or "".join(self.b[o:self.k + 1]) != s:
            return False
        self.j = self.k - n
        return True

    def setto(self, s: str) -> None:
        j = self.j
        self.b[j + 1:] = list(s)
        self.k = j + len(s)

    def r(self, s: str) -> None:
        if self.m() > 0:
            self.setto(s)

    # -- the six steps of the C code ----------------------------------------------------------------------------
    def step1(self) -> None:
        b = self.b
        if b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.setto("i")
            elif b[self.k - 1] != "s":
                self.k -= 1
        del b[self.k + 1:]
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowelinstem():
            self.k = self.j
            del b[self.k + 1:]
            if self.ends("at"):
                self.setto("ate")
            elif self.ends("bl"):
                self.setto("ble")
            elif self.ends("iz"):
                self.setto("ize")
            elif self.doublec(self.k):
                ch = b[self.k]
                if ch not in "lsz":
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):
                self.setto("e")
        del b[self.k + 1:]

    def step2(self) -> None:
        if self.ends("y") and self.vowelinstem():
            self.b[self.k] = "i"

    _STEP3 = {
        "a": (("ational", "ate"), ("tional", "tion")),
        "c": (("enci", "ence"), ("anci", "ance")),
        "e": (("izer", "ize"),),
        "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
        "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
        "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
        "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
        "g": (("logi", "log"),),
    }

    def step3(self) -> None:
        if self.k == 0:
            return
        for suffix, repl in self._STEP3.get(self.b[self.k - 1], ()):
            if self.ends(suffix):
                self.r(repl)
                break
        del self.b[self.k + 1:]

    _STEP4 = {
        "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
        "i": (("iciti", "ic"),),
        "l": (("ical", "ic"), ("ful", "")),
        "s": (("ness", ""),),
    }

    def step4(self) -> None:
        for suffix, repl in self._STEP4.get(self.b[self.k], ()):
            if self.ends(suffix):
                self.r(repl)
                break
        del self.b[self.k + 1:]

    _STEP5 = {
        "a": ("al",), "c": ("ance", "ence"), "e": ("er",), "i": ("ic",), "l": ("able", "ible"),
        "n": ("ant", "ement", "ment", "ent"), "s": ("ism",), "t": ("ate", "iti"), "u": ("ous",), "v": ("ive",),
        "z": ("ize",),
    }

    def step5(self) -> None:
        if self.k == 0:
            return
        ch = self.b[self.k - 1]
        if ch == "o":
            if self.ends("ion") and self.j >= 0 and self.b[self.j] in "st":
                pass
            elif self.ends("ou"):
                pass
            else:
                return
        else:
            for suffix in self._STEP5.get(ch, ()):
                if self.ends(suffix):
                    break
            else:
                return
        if self.m() > 1:
            self.k = self.j
            del self.b[self.k + 1:]

    def step6(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.doublec(self.k) and self.m() > 1:
            self.k -= 1
        del self.b[self.k + 1:]

    def run(self) -> str:
        if self.k > 1:  # Lucene leaves words of one or two characters alone
            self.step1()
            self.step2()
            self.step3()
            self.step4()
            self.step5()
            self.step6()
        return "".join(self.b[:self.k + 1])


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The Porter stem of a lower-cased ``word``, exactly as Lucene's ``PorterStemFilter`` computes it."""
    return _Stemmer(word).run()
