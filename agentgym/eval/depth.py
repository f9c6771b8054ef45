"""The one nesting limit of what the results writers write and ``agentgym view`` renders.

An env's ``info`` or a model server's ``usage`` can nest arbitrarily deep; Python's ``json`` and any recursive walk
fail past about a thousand levels (``RecursionError``), and a browser's renderer has limits too. So the results
file, the transcripts side file and the viewer share :data:`MAX_DEPTH`: a container nested deeper is replaced by a
marker string saying so (:func:`cap_depth`, iterative, never recursive), on writing and again on viewing (for rows
written by other tools or older versions).
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["MAX_DEPTH", "DEPTH_MARKER", "cap_depth"]

#: How deep a value may nest in a results row or transcript (the row itself is level 0): ample for every env's info
#: (they nest a few levels), far below what ``json`` can encode.
MAX_DEPTH = 64

#: What replaces a container nested deeper than the limit.
DEPTH_MARKER = f"[nested deeper than {MAX_DEPTH} levels: cut]"


def _same(x: Any) -> Any:
    return x


def cap_depth(value: Any, max_depth: int = MAX_DEPTH, leaf: Callable[[Any], Any] = _same,
              key_of: Callable[[Any], str] = str) -> Any:
    """A copy of ``value`` in which dicts, lists and tuples (tuples become lists, dict keys ``key_of(k)``, strings by
    default) nested deeper than ``max_depth`` are replaced by :data:`DEPTH_MARKER`, and every other value by
    ``leaf(value)``. Iterative: any depth of input is fine."""
    marker = DEPTH_MARKER if max_depth == MAX_DEPTH else f"[nested deeper than {max_depth} levels: cut]"
    holder: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(value, holder, 0, 0)]
    while stack:
        src, parent, key, depth = stack.pop()
        if isinstance(src, dict):
            if depth > max_depth:
                parent[key] = marker
                continue
            new: Any = {}
            parent[key] = new
            for k, v in src.items():
                k = key_of(k)
                new[k] = None  # the key's place, in order; filled when its value is popped
                stack.append((v, new, k, depth + 1))
        elif isinstance(src, (list, tuple)):
            if depth > max_depth:
                parent[key] = marker
                continue
            new = [None] * len(src)
            parent[key] = new
            stack.extend((v, new, i, depth + 1) for i, v in enumerate(src))
        else:
            parent[key] = leaf(src)
    return holder[0]
