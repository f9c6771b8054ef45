"""Procedural ALFWorld games in the official layout, each written only after alfworld's expert solved it.

Game ``index`` of a run with ``seed`` has family ``FAMILIES[index % 6]`` (so any 6k consecutive indices hold k games
of each family) and is drawn with ``numpy.random.default_rng([seed, index, attempt])`` for attempt = 0, 1, ... until
the scene is feasible and **alfworld's handcoded expert** (``AlfredExpert(expert_type="handcoded")``, the default
checker of ``alfworld-generate``) wins it on the unmodified engine within 40 steps (so a 50-turn episode can replay it). Its commands are stored as the
game's ``walkthrough`` with ``solvable: true``, exactly the fields ``alfworld-generate`` writes. (alfworld's planner
expert is not used here: Fast Downward's search takes minutes on some pick-two scenes.) Output layout::

    OUT/<split>/<task_type>-<Object>-None-<Parent|Toggle>-<index>/trial_G<seed>_<index>/{game.tw-pddl,traj_data.json}

``game.tw-pddl`` holds the ``alfred.pddl`` domain and ``alfred.twl2`` grammar shipped in the alfworld wheel (with the
task text substituted for ``UNKNOWN GOAL``, as ``add_task_to_grammar`` does) and the generated PDDL problem;
``traj_data.json`` holds ALFRED's ``task_type`` and ``pddl_params`` (which the handcoded expert reads) plus the scene
summary. Same seed and index, same bytes. CLI: ``agentgym alfworld generate --out DIR --n N``
(:mod:`.cli`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data import find_data
from ...errors import AgentGymError
from .scenes import FAMILIES, Scene, SceneError, sample_scene, scene_to_pddl, task_description

__all__ = ["GeneratedGame", "generate_game", "write_game", "generate", "game_logic", "GENERATOR_VERSION",
           "GenerationError", "game_identity", "candidate_identities", "find_repeated_games", "DistinctCheck"]

logger = logging.getLogger(__name__)
GENERATOR_VERSION = 1
MAX_ATTEMPTS = 40
#: The ``generated`` split of ALFWorld-v0 (:mod:`.games`): its fixed seed and default size (10 games per family;
#: more with ``generated_size``).
GENERATED_SEED = 20261122
GENERATED_SIZE = 60
#: Its ids: gen-0 .. gen-{GENERATED_LIMIT - 1}. No two of them can be the same game (``agentgym alfworld
#: check-distinct --n 10000`` checks every scene the generator may keep for each against all the others'); a larger
#: index is refused rather than played unchecked.
GENERATED_LIMIT = 10_000


class GenerationError(AgentGymError):
    """No solvable game could be drawn for an index within ``MAX_ATTEMPTS``."""

    kind = "env_crash"


_LOGIC: dict[str, str] = {}


def game_logic() -> dict[str, str]:
    """``{"pddl_domain", "grammar"}``: alfworld's ``alfred.pddl`` / ``alfred.twl2`` (from the installed wheel)."""
    if not _LOGIC:
        root = find_data("alfworld/logic", package=("alfworld", "data"))
        _LOGIC["pddl_domain"] = (root / "alfred.pddl").read_text()
        _LOGIC["grammar"] = (root / "alfred.twl2").read_text()
    return dict(_LOGIC)


@dataclass(frozen=True)
class GeneratedGame:
    """An expert-verified game, ready to write."""

    seed: int
    index: int
    attempt: int
    scene: Scene
    gamedata: dict
    traj_data: dict

    @property
    def folder(self) -> str:
        s = self.scene
        second = s.toggle_target if s.family == "look_at_obj_in_light" else s.parent_target
        return f"{s.family}-{s.object_target}-None-{second}-{self.index}"

    @property
    def trial(self) -> str:
        return f"trial_G{self.seed}_{self.index:05d}"


def _traj_data(scene: Scene, seed: int, index: int, attempt: int, desc: str, trial: str) -> dict:
    rtypes = {r[1]: r[0] for r in scene.receptacles}
    counts: dict[str, int] = {}
    for rt, _, _ in scene.receptacles:
        counts[rt] = counts.get(rt, 0) + 1
    return {
        "task_id": trial,
        "task_type": scene.family,
        "pddl_params": {"object_target": scene.object_target, "parent_target": scene.parent_target,
                        "toggle_target": scene.toggle_target, "mrecep_target": "", "object_sliced": False},
        "scene": {"floor_plan": f"Generated{scene.room}", "room": scene.room, "scene_num": index,
                  "random_seed": [seed, index, attempt], "receptacles": dict(sorted(counts.items())),
                  "object_poses": [{"objectName": o.otype, "parentReceptacle": rtypes[o.receptacle]}
                                   for o in scene.objects]},
        "turk_annotations": {"anns": [{"task_desc": desc[0].upper() + desc[1:] + ".", "high_descs": []}]},
        "plan": {"high_pddl": [], "low_actions": []},
        "images": [],
        "agentgym": {"generator": "agentgym.envs.alfworld.generate", "version": GENERATOR_VERSION, "seed": seed,
                     "index": index, "attempt": attempt},
    }


def game_identity(traj: dict) -> dict:
    """What makes a generated game the game it is, read from its ``traj_data.json``: the family, the goal (targets
    and task text), the room, how many receptacles of each type it has, and which object types start in which
    receptacle types. Ids, coordinates, locations, the receptacles' numbering and listing order, the seed, index and
    attempt are left out, so two games that differ only there count as the same game (a coarser identity than the
    game file's bytes: distinct identities are distinct tasks for an agent)."""
    scene = traj["scene"]
    return {"family": traj["task_type"], "goal": {k: traj["pddl_params"][k] for k in
                                                  ("object_target", "parent_target", "toggle_target")},
            "task": traj["turk_annotations"]["anns"][0]["task_desc"], "room": scene["room"],
            "receptacles": dict(sorted(scene["receptacles"].items())),
            "objects": sorted([p["objectName"], p["parentReceptacle"]] for p in scene["object_poses"])}


def candidate_identities(seed: int, index: int, family: str | None = None) -> list[tuple[int, dict]]:
    """(attempt, :func:`game_identity`) of every scene :func:`generate_game` may keep for game ``index`` of ``seed``:
    each feasible attempt of the ``MAX_ATTEMPTS`` (which one is kept depends on alfworld's expert, not run here)."""
    family = FAMILIES[index % len(FAMILIES)] if family is None else family
    out = []
    for attempt in range(MAX_ATTEMPTS):
        try:
            scene = sample_scene(np.random.default_rng([int(seed), int(index), attempt]), family)
        except SceneError:
            continue
        trial = f"trial_G{seed}_{index:05d}"
        out.append((attempt, game_identity(_traj_data(scene, int(seed), int(index), attempt, task_description(scene),
                                                      trial))))
    return out


@dataclass(frozen=True)
class DistinctCheck:
    """What :func:`find_repeated_games` found: ``repeats`` (index, attempt, other index, other attempt) for every two
    candidate scenes of different indices that share an identity, and how many candidates and identities it saw."""

    repeats: tuple[tuple[int, int, int, int], ...]
    candidates: int
    identities: int


def find_repeated_games(seed: int, n: int, start: int = 0, progress=None) -> DistinctCheck:
    """Whether two of games ``start .. start+n-1`` of ``seed`` could be the same game: every candidate scene
    (:func:`candidate_identities`) of each index against those of the others. No repeats means no two of these games
    can repeat one another, whichever attempts alfworld's expert keeps. ``progress(done)`` is called after each
    index."""
    first: dict[str, tuple[int, int]] = {}
    repeats = []
    candidates = 0
    for i in range(start, start + n):
        for attempt, identity in candidate_identities(seed, i):
            candidates += 1
            other = first.setdefault(json.dumps(identity, sort_keys=True), (i, attempt))
            if other[0] != i:
                repeats.append((i, attempt, *other))
        if progress is not None:
            progress(i - start + 1)
    return DistinctCheck(tuple(repeats), candidates, len(first))


_VERIFIER = None
EXPERT_MAX_STEPS = 40


def _verifier():
    """alfworld-generate's checker: PddlEnv (as FastPddlEnv) + AlfredDemangler + AlfredInfos + AlfredExpert
    (handcoded)."""
    global _VERIFIER
    if _VERIFIER is None:
        from .engine import install_speedups, require_engine

        require_engine()
        install_speedups()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import (AlfredDemangler, AlfredExpert, AlfredExpertType,
                                                               AlfredInfos)

        from .fastpddl import FastPddlEnv

        # The engine's fast PddlEnv (same states, texts and facts as the stock one; the generated games' bytes are
        # unchanged, which tests/alfworld/test_output_digest.py checks on a fresh cache).
        env = FastPddlEnv(textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"]))
        env = AlfredInfos(AlfredDemangler(env, shuffle=False))
        _VERIFIER = AlfredExpert(env, expert_type=AlfredExpertType.HANDCODED)
    return _VERIFIER


def solve(gamefile: str | Path, seed: int = 0, max_steps: int = EXPERT_MAX_STEPS) -> list[str] | None:
    """Play ``gamefile`` (with its ``traj_data.json`` beside it) with alfworld's handcoded expert, as
    ``alfworld-generate``'s ``is_solvable`` does (no random perturbation); its commands if it wins, else None.

    The expert breaks ties with the ``random`` module; it is given its own ``random.Random(seed)`` for the call so
    the walkthrough is reproducible (the process-wide generator is neither used nor reseeded).
    """
    import random as _random

    from alfworld.agents.expert import handcoded_expert

    env = _verifier()
    saved = handcoded_expert.random
    handcoded_expert.random = _random.Random(seed)
    trajectory: list[str] = []
    try:
        env.load(str(gamefile))
        state = env.reset()
        done = False
        while not done:
            if len(trajectory) >= max_steps:
                return None
            command = state["extra.expert_plan"][0]
            state, _, done = env.step(command)
            trajectory.append(command)
        return trajectory if state["won"] else None
    except Exception as e:  # the expert gives up by raising (HandCodedAgentFailed, Timeout)
        logger.debug("handcoded expert failed on %s: %r", gamefile, e)
        return None
    finally:
        handcoded_expert.random = saved


def generate_game(seed: int, index: int, family: str | None = None, *,
                  workdir: str | Path | None = None) -> GeneratedGame:
    """Game ``index`` of ``seed`` (family ``FAMILIES[index % 6]`` unless given), solved by alfworld's expert.

    Candidate games are written to a scratch folder (the expert reads ``traj_data.json`` beside the game file).
    """
    family = FAMILIES[index % len(FAMILIES)] if family is None else family
    logic = game_logic()
    scratch = Path(tempfile.mkdtemp(prefix="alfworld-gen-", dir=workdir))
    try:
        for attempt in range(MAX_ATTEMPTS):
            rng = np.random.default_rng([int(seed), int(index), attempt])
            try:
                scene = sample_scene(rng, family)
            except SceneError:
                continue
            trial = f"trial_G{seed}_{index:05d}"
            desc = task_description(scene)
            gamedata = {"pddl_domain": logic["pddl_domain"],
                        "grammar": logic["grammar"].replace("UNKNOWN GOAL", desc),
                        "pddl_problem": scene_to_pddl(scene, f"plan_{trial}"),
                        "solvable": None, "walkthrough": None}
            traj = _traj_data(scene, int(seed), int(index), attempt, desc, trial)
            cand = scratch / f"a{attempt}"
            cand.mkdir()
            (cand / "traj_data.json").write_text(json.dumps(traj, indent=1))
            (cand / "game.tw-pddl").write_text(json.dumps(gamedata))
            walkthrough = solve(cand / "game.tw-pddl", seed=attempt)
            if walkthrough is None:
                logger.info("ALFWorld generator: seed %s index %s attempt %s not solved by the expert; drawing "
                            "again", seed, index, attempt)
                continue
            gamedata["solvable"], gamedata["walkthrough"] = True, walkthrough
            return GeneratedGame(seed=int(seed), index=int(index), attempt=attempt, scene=scene,
                                 gamedata=gamedata, traj_data=traj)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    raise GenerationError(f"no solvable {family} game for seed {seed} index {index} in {MAX_ATTEMPTS} attempts")


def write_game(split_dir: str | Path, game: GeneratedGame) -> Path:
    """Write ``game`` under ``split_dir`` atomically; return its ``game.tw-pddl`` path."""
    split_dir = Path(split_dir)
    split_dir.mkdir(parents=True, exist_ok=True)
    final = split_dir / game.folder
    if (final / game.trial / "game.tw-pddl").exists():
        return final / game.trial / "game.tw-pddl"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=split_dir))
    try:
        trial = tmp / game.trial
        trial.mkdir()
        (trial / "traj_data.json").write_text(json.dumps(game.traj_data, indent=1))
        (trial / "game.tw-pddl").write_text(json.dumps(game.gamedata))
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / game.trial / "game.tw-pddl").exists():  # not a concurrent writer of the same game
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final / game.trial / "game.tw-pddl"


def generate(out: str | Path, n: int, seed: int = 0, *, split: str = "generated", start: int = 0,
             families: tuple[str, ...] | None = None) -> list[Path]:
    """Write games ``start .. start+n-1`` of ``seed`` under ``out/<split>``; return their ``game.tw-pddl`` paths.

    ``families`` restricts the run: index i then has family ``families[i % len(families)]``.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    fams = tuple(families) if families else None
    for f in fams or ():
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}; choose from {FAMILIES}")
    paths = []
    for i in range(start, start + n):
        fam = fams[i % len(fams)] if fams else None
        game = generate_game(seed, i, fam)
        paths.append(write_game(Path(out) / split, game))
        logger.info("ALFWorld generator: wrote %s", paths[-1].parent)
    return paths
