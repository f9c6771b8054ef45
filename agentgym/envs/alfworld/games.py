"""Finding ALFWorld games on disk: the official ``json_2.1.1`` splits and the cached ``generated`` split.

A game is a folder holding ``game.tw-pddl`` and ``traj_data.json`` (ALFWorld's release layout
``json_2.1.1/<split>/<task_type>-<Object>-<Mrecep>-<Parent>-<scene>/trial_*/``). As in
``alfworld.agents.environment.AlfredTWEnv.collect_game_files``, folders with movable receptacles or sliced objects
are skipped, and so are games whose ``game.tw-pddl`` says ``"solvable": false`` or lacks the key.

Official splits (``train``, ``valid_seen``, ``valid_unseen``) are looked up, in order, under an explicit
``data_path`` (a ``json_2.1.1`` folder, its parent, or the split folder itself), ``$ALFWORLD_DATA/json_2.1.1`` (the
variable ``alfworld-download`` uses; default ``~/.cache/alfworld``), ``$AGENTGYM_DATA/alfworld/json_2.1.1`` and
``alfworld/json_2.1.1`` in each shared data folder (:func:`agentgym.data.shared_data_dirs`). Finding no game raises
:class:`~agentgym.errors.DataNotFoundError` at once, naming every folder tried and how to get the data
(``alfworld-download``) — instead of the stock env's silent endless loop.

The ``generated`` split is :data:`GENERATED_SIZE` games of :mod:`.generate` with seed :data:`GENERATED_SEED`
(indices 0..N-1, family ``FAMILIES[i % 6]``; ``generated_size`` up to :data:`GENERATED_LIMIT`, the range checked
free of repeated games: :func:`.generate.find_repeated_games`). Each game is generated the first time it is needed and cached under
``$AGENTGYM_CACHE`` (else ``$XDG_CACHE_HOME/agentgym``, else ``~/.cache/agentgym``) ``/alfworld/generated-v<version>``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ...data import cache_root, shared_data_dirs
from ...errors import DataNotFoundError, TaskError
from .generate import GENERATED_LIMIT, GENERATED_SEED, GENERATED_SIZE
from .scenes import FAMILIES

__all__ = ["GameRecord", "OFFICIAL_SPLITS", "GENERATED_SEED", "GENERATED_SIZE", "GENERATED_LIMIT", "official_split_dir",
           "scan_games",
           "cache_root", "generated_game", "generated_family", "family_of_folder"]

OFFICIAL_SPLITS = ("train", "valid_seen", "valid_unseen")
_REL = Path("alfworld") / "json_2.1.1"  # the official layout under an agentgym data root
_DOWNLOAD_HINT = ("get the official games with `pip install alfworld && alfworld-download` (writes "
                  "$ALFWORLD_DATA/json_2.1.1, default ~/.cache/alfworld), or pass data_path=..., or play the "
                  "embedded split='generated'")


@dataclass(frozen=True)
class GameRecord:
    """One playable game: its id, files and family."""

    task_id: str
    gamefile: str
    family: str

    @property
    def traj_path(self) -> str:
        return str(Path(self.gamefile).parent / "traj_data.json")


def family_of_folder(name: str) -> str | None:
    """The task family encoded in an ALFWorld task folder name (``pick_heat_then_place_in_recep-Potato-...``)."""
    head = name.split("-", 1)[0]
    return head if head in FAMILIES else None


def _alfworld_data_dir() -> Path:
    return Path(os.path.expandvars(os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld"))).expanduser()


def official_split_dir(split: str, data_path: str | os.PathLike | None = None) -> Path:
    """The folder of an official split that holds at least one game; DataNotFoundError otherwise."""
    if split not in OFFICIAL_SPLITS:
        raise TaskError(f"unknown ALFWorld split {split!r}; official splits are {OFFICIAL_SPLITS}")
    candidates: list[tuple[str, Path]] = []  # (how it was found, folder)
    if data_path is not None:
        p = Path(data_path).expanduser()
        candidates += [("data_path", p / split), ("data_path", p / "json_2.1.1" / split), ("data_path", p)]
    else:
        candidates.append(("$ALFWORLD_DATA" if os.environ.get("ALFWORLD_DATA") else "$ALFWORLD_DATA unset, "
                           "alfworld-download's default", _alfworld_data_dir() / "json_2.1.1" / split))
        if os.environ.get("AGENTGYM_DATA"):
            candidates.append(("$AGENTGYM_DATA", Path(os.environ["AGENTGYM_DATA"]) / _REL / split))
        candidates += [("shared data", root / _REL / split) for root in shared_data_dirs()]
    tried = []
    for how, c in candidates:
        if c.is_dir() and _has_game(c):
            return c
        tried.append(f"{c} ({how}; {'no games' if c.exists() else 'missing'})")
    if data_path is None and not os.environ.get("AGENTGYM_DATA"):
        tried.append("$AGENTGYM_DATA/alfworld/json_2.1.1 ($AGENTGYM_DATA unset)")
    raise DataNotFoundError(f"no ALFWorld games for split {split!r}: looked for <task>/<trial>/game.tw-pddl + "
                            f"traj_data.json in {'; '.join(tried)}. To fix: {_DOWNLOAD_HINT}")


def _has_game(root: Path) -> bool:
    for _dirpath, _dirs, files in os.walk(root):
        if "game.tw-pddl" in files and "traj_data.json" in files:
            return True
    return False


_SCAN_CACHE: dict[str, tuple[GameRecord, ...]] = {}
_SCAN_LOCK = threading.Lock()


def scan_games(root: str | os.PathLike, split: str) -> tuple[GameRecord, ...]:
    """Every playable game under ``root`` (sorted by path), with ids ``<split>/<task folder>/<trial>``."""
    root = Path(root)
    key = f"{root.resolve()}|{split}"
    with _SCAN_LOCK:
        if key in _SCAN_CACHE:
            return _SCAN_CACHE[key]
    games = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        if "movable" in dirpath or "Sliced" in dirpath:
            continue
        d = Path(dirpath)
        family = family_of_folder(d.parent.name)
        if family is None:
            try:
                family = json.loads((d / "traj_data.json").read_text()).get("task_type")
            except (OSError, ValueError):
                continue
            if family not in FAMILIES:
                continue
        if not _solvable(d / "game.tw-pddl"):
            continue
        games.append(GameRecord(task_id=f"{split}/{d.parent.name}/{d.name}", gamefile=str(d / "game.tw-pddl"),
                                family=family))
    if not games:
        raise DataNotFoundError(f"no playable ALFWorld games under {root} (need <task>/<trial>/game.tw-pddl with "
                                f"\"solvable\": true and traj_data.json). To fix: {_DOWNLOAD_HINT}")
    games.sort(key=lambda g: g.task_id)
    out = tuple(games)
    with _SCAN_LOCK:
        _SCAN_CACHE[key] = out
    return out


def _solvable(gamefile: Path) -> bool:
    # alfworld keeps only games whose file records "solvable": true; the key sits near the end of a large JSON
    # object, so read the tail first and parse the whole file only when that is inconclusive.
    try:
        with open(gamefile, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().decode("utf-8", "replace")
        if '"solvable": true' in tail:
            return True
        if '"solvable": false' in tail or '"solvable": null' in tail:
            return False
        return json.loads(Path(gamefile).read_text()).get("solvable") is True
    except (OSError, ValueError):
        return False


# ---- the generated split --------------------------------------------------------------------------------------
def generated_dir() -> Path:
    from .generate import GENERATOR_VERSION

    return cache_root() / "alfworld" / f"generated-v{GENERATOR_VERSION}" / "generated"


def generated_family(index: int) -> str:
    return FAMILIES[index % len(FAMILIES)]


_GEN_LOCK = threading.Lock()


def generated_game(index: int, seed: int = GENERATED_SEED) -> GameRecord:
    """Game ``index`` of the generated split, built (expert-verified) and cached on first use."""
    if index < 0:
        raise TaskError(f"generated game index must be >= 0, got {index}")
    root = generated_dir() if seed == GENERATED_SEED else generated_dir().parent / f"seed{seed}"
    trial = f"trial_G{seed}_{index:05d}"
    suffix = f"-{index}"
    family = generated_family(index)
    tid = f"gen-{index}" if seed == GENERATED_SEED else f"gen-{seed}-{index}"
    if root.is_dir():
        for d in root.iterdir():
            if d.name.startswith(family + "-") and d.name.endswith(suffix) and (d / trial / "game.tw-pddl").exists():
                return GameRecord(task_id=tid, gamefile=str(d / trial / "game.tw-pddl"), family=family)
    from .generate import generate_game, write_game

    with _GEN_LOCK:
        game = generate_game(seed, index)
        path = write_game(root, game)
    return GameRecord(task_id=tid, gamefile=str(path), family=family)
