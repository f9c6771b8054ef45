"""ALFWorld-v0's output, frozen: a fixed set of episodes replayed and digested, step by step.

Every speed-up of the engine (``agentgym.envs.alfworld.engine``) must leave the texts exactly as they are. This test
replays 18 fixed episodes on the generated split's first six games (one per family), in one env (so resets also
switch games), under the default (canonical) rules:

* ``walkthrough``: the game's recorded expert walkthrough, to the win;
* ``random``: 25 uniform admissible commands (seeded ``numpy`` generator);
* ``perturbed``: 30 steps mixing walkthrough commands, admissible ones, and mutations that the engine must answer
  ``Nothing happens.``: other letter case, doubled spaces, a final period, the older ``put X in Y`` wording, a
  command admissible in an earlier state, a receptacle the room does not have, non-commands, the empty command and a
  response without an ``<action>`` tag.

At the reset and at every step it digests (SHA-256 over canonical JSON) the observation, the engine's full admissible
list, ``info["admissible_actions"]``, the reward, ``terminated``/``truncated``, ``won`` and ``obs_hash`` (which covers
the engine's dynamic facts). The digests were recorded from the code before any optimisation; any change of output
fails the test, naming the episode and the first step whose record changed (compare with ``--record``'s listing).

The games themselves are checked first (their SHA-256), so a changed generator is told apart from a changed engine.

Re-record only when an output change is intended and reviewed::

    python tests/alfworld/test_output_digest.py --record
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("textworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("fast_downward", reason="pip install -e '.[alfworld]'")

GAMES = [f"gen-{i}" for i in range(6)]  # gen-i has family FAMILIES[i % 6]: one game per family
RANDOM_STEPS = 25
PERTURBED_STEPS = 30

#: SHA-256 of each game's game.tw-pddl (the generator's output; not the engine's).
GAME_SHA256 = {
    "gen-0": "5e4ded358e411234cc6ea16867a07571ad2a998d6c4fbf3b01be9cbf1082b368",
    "gen-1": "0233eeb5c8ca0edfbe70be0d0277ebb9d7467aea5ae2d761299573032c64dc50",
    "gen-2": "5abacfd3dbff459c766f1a15ff039b914ccf8dc6871144938066d632c852b91d",
    "gen-3": "6278c67978fb4849ebe9fb27439089bc956b564701312c7f0d36620be8621554",
    "gen-4": "7d8fa56c8e86a955aebfd5ee6efd3604e264c5ac847159a04d6c42f172b91885",
    "gen-5": "2fa562033c1e4d45a4cbee85acd1582b065adc7d2b1bd62a99604f729a6d157a",
}

#: (game, episode kind) -> (steps, SHA-256 of the episode's records), recorded before any optimisation.
EPISODE_DIGESTS: dict[str, tuple[int, str]] = {
    "gen-0/walkthrough": (19, "f78172dbe70e445f8155cefd6c3a67508acc0493cba825caa462c7de22677afa"),
    "gen-0/random": (26, "a9e5c6f443d124af794ba64d4a76434ee5c2bc39174779e03c7c15c182cbfd1b"),
    "gen-0/perturbed": (31, "31d6e080e3f4a32114cdcc9f733b0b6ac00c41af17d155ef7bf9cdeafe63d331"),
    "gen-1/walkthrough": (22, "fced6b9c937f3ad36308420464866a3eb10be0d05d24c2b8f2fbb98ca2c9f4a0"),
    "gen-1/random": (26, "0c2c071b3840aa616d7e0ed9181058d07a70506ed844536c99707258d480cbc5"),
    "gen-1/perturbed": (31, "87aa107a84215e06c9bf2a6c52a73059cab265c24a55e08b1536545779c46c22"),
    "gen-2/walkthrough": (19, "433d9a15f73f639dfe04a8a4e105771b97df477c19c8c390927ee52188a64e4e"),
    "gen-2/random": (26, "d290ad11e4b24d64570080faf459c953b5e71a089a311ff1ba65538c27b0c83b"),
    "gen-2/perturbed": (31, "7a6b95e94bdb55eeb56a86fda1b5ee364788e40e4ad510448a8f59a54af82f2c"),
    "gen-3/walkthrough": (17, "02c1014505f86fdfabfcc25454c5d0829d9d71ade080e69bf6504df86759f237"),
    "gen-3/random": (26, "9c108436e6a3183f3f327c19c753e9a1956e78058a9498baf5d5baefb1569198"),
    "gen-3/perturbed": (31, "e6453a1f1f7a33c650f038b85134ffd8519c77e64253edabd00e26140d20b009"),
    "gen-4/walkthrough": (12, "f957240f2520cbc04a4435009e9d375d9d74851a5d93d18d4da0e27d748778a1"),
    "gen-4/random": (26, "9248adfc5f5e3075899138b7e75fc42bf90ee327963ed0c43ec779d1ed7ee304"),
    "gen-4/perturbed": (31, "8cb3257e1612682a065bd65b5226ccbb8eb0129c64518d4044c4897bbfac980c"),
    "gen-5/walkthrough": (16, "f25e00c632e760cda5ce7013c50e0f282856522112df50873a02d69f691ec558"),
    "gen-5/random": (26, "caa6544515a640eb1a34e093a9b178baae1b09777c95edda8901c2a4b3e989ce"),
    "gen-5/perturbed": (31, "b1d09dbd7b5eeb60dd29183d2e0bee3aa041a1f17638f40c933cecc260969071"),
}


def _mutations(cmd: str, rng: np.random.Generator, adm: list[str], seen: list[str]) -> str:
    """One response whose command the canonical rules do not run (or run: surrounding spaces are stripped)."""
    k = int(rng.integers(11))
    if k == 0:
        return f"<action>{cmd.upper()}</action>"
    if k == 1:
        return f"<action>{cmd.replace(' ', '  ', 1)}</action>"
    if k == 2:
        return f"<action>{cmd}.</action>"
    if k == 3:
        moves = [a for a in adm if a.startswith("move ")]
        if moves:
            obj, _, recep = moves[int(rng.integers(len(moves)))][5:].partition(" to ")
            return f"<action>put {obj} in {recep}</action>"
        return "<action>put book 2 in diningtable 1</action>"
    if k == 4:
        stale = [c for c in seen if c not in adm]
        return f"<action>{stale[int(rng.integers(len(stale)))] if stale else 'open safe 1'}</action>"
    if k == 5:
        return "<action>go to cabinet 37</action>"
    if k == 6:
        return ("<action>dance wildly</action>", "<action>take apple 1</action>")[int(rng.integers(2))]
    if k == 7:
        return "<action></action>"
    if k == 8:
        return ("go to fridge 1", "<action>go to fridge 1", "I should look around.")[int(rng.integers(3))]
    if k == 9:
        return f"<action>  {cmd}\t</action>"  # stripped by the engine: runs
    return "<action>help</action>"


def _record(obs: str, env, info: dict, reward: float = 0.0, term: bool = False, trunc: bool = False) -> str:
    return json.dumps([obs, list(env._state.admissible), info["admissible_actions"], reward, term, trunc,
                       bool(info["won"]), info["obs_hash"]], ensure_ascii=False, separators=(",", ":"))


def replay() -> tuple[dict[str, str], dict[str, list[str]]]:
    """(game sha256 by id, records by episode key) of the fixed episodes."""
    import agentgym
    from agentgym.envs.alfworld.games import generated_game

    env = agentgym.make("ALFWorld-v0", rules="canonical", max_turns=50)
    games = {tid: generated_game(int(tid.split("-")[1])) for tid in GAMES}
    shas = {tid: hashlib.sha256(Path(g.gamefile).read_bytes()).hexdigest() for tid, g in games.items()}
    episodes: dict[str, list[str]] = {}
    try:
        for gi, tid in enumerate(GAMES):
            walkthrough = json.loads(Path(games[tid].gamefile).read_text())["walkthrough"]
            for kind in ("walkthrough", "random", "perturbed"):
                rng = np.random.default_rng([gi, len(kind)])
                obs, info = env.reset(options={"task_id": tid})
                recs = [_record(obs, env, info)]
                seen: list[str] = list(env._state.admissible)
                pos = 0
                steps = {"walkthrough": len(walkthrough), "random": RANDOM_STEPS, "perturbed": PERTURBED_STEPS}[kind]
                for _ in range(steps):
                    adm = list(env._state.admissible)
                    if kind == "walkthrough":
                        response = f"<action>{walkthrough[pos]}</action>"
                        pos += 1
                    elif kind == "random":
                        response = env.random_action(rng)
                    else:
                        u = rng.random()
                        nxt = walkthrough[pos] if pos < len(walkthrough) else None
                        if u < 0.3 and nxt is not None and nxt in adm:
                            response = f"<action>{nxt}</action>"
                            pos += 1
                        elif u < 0.55:
                            response = f"<action>{adm[int(rng.integers(len(adm)))]}</action>"
                        else:
                            base = nxt if nxt is not None and rng.random() < 0.5 else adm[int(rng.integers(len(adm)))]
                            response = _mutations(base, rng, adm, seen)
                    obs, r, term, trunc, info = env.step(response)
                    recs.append(_record(obs, env, info, r, term, trunc))
                    seen.extend(a for a in env._state.admissible if a not in seen)
                    if term or trunc:
                        break
                episodes[f"{tid}/{kind}"] = recs
    finally:
        env.close()
    return shas, episodes


def _digest(records: list[str]) -> str:
    h = hashlib.sha256()
    for rec in records:
        h.update(rec.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def test_replayed_outputs_match_the_recorded_digest():
    shas, episodes = replay()
    assert shas == GAME_SHA256, ("the generated games changed (generator, numpy or data), so the episodes are not "
                                 f"comparable; games now: {json.dumps(shas, indent=1)}")
    got = {key: (len(recs), _digest(recs)) for key, recs in episodes.items()}
    changed = [key for key in EPISODE_DIGESTS if got.get(key) != tuple(EPISODE_DIGESTS[key])]
    assert set(got) == set(EPISODE_DIGESTS) and not changed, (
        f"ALFWorld-v0's output changed in {len(changed)} of {len(EPISODE_DIGESTS)} episodes: {changed}; "
        f"first of them now (steps, digest): {got.get(changed[0]) if changed else None}. Compare the step records "
        "with `python tests/alfworld/test_output_digest.py --record --dump DIR` on the old and the new code.")
    # The episodes did what they are meant to: every walkthrough wins; the others are off-script.
    for tid in GAMES:
        assert json.loads(episodes[f"{tid}/walkthrough"][-1])[3] == 1.0, tid
    not_run = sum(json.loads(r)[0] == "Nothing happens." for k, recs in episodes.items() for r in recs[1:])
    assert not_run >= 40, not_run


def main(argv: list[str]) -> int:
    """``--record``: print the constants of this file from the current code; ``--dump DIR``: write every record."""
    shas, episodes = replay()
    if "--dump" in argv:
        out = Path(argv[argv.index("--dump") + 1])
        out.mkdir(parents=True, exist_ok=True)
        for key, recs in episodes.items():
            (out / (key.replace("/", "_") + ".jsonl")).write_text("\n".join(recs) + "\n")
    sys.stdout.write(f"GAME_SHA256 = {json.dumps(shas, indent=4)}\n")
    digests = {key: [len(recs), _digest(recs)] for key, recs in episodes.items()}
    sys.stdout.write(f"EPISODE_DIGESTS = {json.dumps(digests, indent=4)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
