"""Our AppWorld task suite, its build into the official layout, and the official splits.

**The suite** is two kinds of task definitions, one form after loading (:class:`AppWorldTask`): the *static* scenarios
in ``task_definitions/<scenario>/`` beside this module (the first 24 tasks: ``scenario.json`` with split, apps,
difficulty, instruction template, shared seed records and the variants -- each with its ``public_data``, optional
``answer``, extra ``seed``/``supervisor_fields`` and the parameters of a deliberately wrong solution --,
``evaluation.py`` (AppWorld's ``evaluate(test, public_data, private_data, main_user, models, ground_truth_answer)``),
``solution.cells`` (the gold solution: Python code cells separated by ``# %%`` lines; not ``.py`` because the ``$name``
placeholders are not Python) and ``wrong.cells`` (a plausible wrong solution)), and the *generated* scenarios of
:mod:`.suite` (Python generators drawing each task from a seeded ``random.Random``). Templates use ``$name``
placeholders filled from ``public_data`` (and ``wrong_<name>`` from the variant's ``wrong``).
``task_definitions/common.json`` holds the supervisor and the date shared by every static task. Task ids follow
AppWorld's ``<scenario>_<n>`` (the scenario is AppWorld's "generator id", so SGC groups by it).

**Splits** (:data:`SPLITS`) are disjoint by scenario: ``gen-train``, ``gen-dev``, ``gen-test`` (each scenario
names its own), and ``gen-all``. They cannot be mistaken for AppWorld's official ``train``/``dev``/
``test_normal``/``test_challenge``, which need the downloaded data (below). The old names of the first 24 tasks
(``train``, ``test``, ``all``) are gone: :data:`RENAMED` says what to use.

**Build**: :func:`ensure_build` turns the tasks into AppWorld's on-disk layout by running ``builder.py`` in the
AppWorld venv, once per content hash (definitions + builder + appworld version), under
``<install root>/builds/<hash>/`` -- deterministic, offline, cached, never committed. A cached build is used only
after it matches its manifest (:func:`verify_build`, a few milliseconds); a damaged one is built again.

**Official splits**: with ``APPWORLD_ROOT`` pointing at a downloaded AppWorld bundle (``appworld download data``:
``data/datasets/*.txt``, ``data/tasks``), the splits ``train``, ``dev``, ``test_normal`` and ``test_challenge`` list
its task ids (``official-train`` is kept as another name of ``train``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from string import Template

from ...errors import DataNotFoundError, EnvCrashError, TaskError
from ...setup_steps import ProgressFn, StepProgress, run_lines
from .install import APPWORLD_VERSION, AppWorldInstall

__all__ = ["AppWorldTask", "Build", "TASK_DIR", "SPLITS", "RENAMED", "load_tasks", "split_tasks", "split_task_ids",
           "ensure_build", "verify_build", "official_root", "official_task_ids", "scenario_of", "CELL_SEPARATOR",
           "task_identity"]

logger = logging.getLogger(__name__)

TASK_DIR = Path(__file__).resolve().parent / "task_definitions"
#: run in the AppWorld venv (:mod:`.in_venv`); its bytes are part of the build hash
BUILDER_SCRIPT = Path(__file__).resolve().parent / "in_venv" / "builder.py"
CELL_SEPARATOR = "# %%"
OFFICIAL_SPLIT_FILES = {"train": "train", "dev": "dev", "test_normal": "test_normal",
                        "test_challenge": "test_challenge", "official-train": "train"}
#: our splits (disjoint by scenario) and what each holds
SPLITS = ("gen-train", "gen-dev", "gen-test", "gen-all")
#: the old names of our first 24 tasks' splits, gone since the suite grew
RENAMED = {"test": "gen-test", "all": "gen-all"}


@dataclass(frozen=True)
class AppWorldTask:
    """One task of our suite (``official`` False) or of the official data (only id and split known here).
    ``apps`` are the apps the gold solution uses; ``difficulty`` is the scenario's level (1-3)."""

    task_id: str
    scenario: str
    split: str
    apps: tuple[str, ...] = ()
    difficulty: int | None = None
    instruction: str = ""
    answer: object = None
    solution: tuple[str, ...] = ()
    wrong_solution: tuple[str, ...] = ()
    spec: dict = field(default_factory=dict, compare=False, repr=False)
    official: bool = False


def scenario_of(task_id: str) -> str:
    """AppWorld's scenario (generator) id of a task id: the part before ``_``."""
    return task_id.split(":")[0].split("_")[0]


def _cells(text: str) -> tuple[str, ...]:
    cells, cur = [], []
    for line in text.splitlines():
        if line.strip() == CELL_SEPARATOR:
            cells.append("\n".join(cur).strip())
            cur = []
        else:
            cur.append(line)
    cells.append("\n".join(cur).strip())
    return tuple(c for c in cells if c)


def _fill(template: str, values: dict, where: str) -> str:
    try:
        return Template(template).substitute(values)
    except (KeyError, ValueError) as e:
        raise TaskError(f"{where}: template placeholder {e} has no value") from e


@lru_cache(maxsize=4)
def _load(task_dir: str) -> tuple[AppWorldTask, ...]:
    root = Path(task_dir)
    common = json.loads((root / "common.json").read_text())
    tasks: list[AppWorldTask] = []
    for sdir in sorted(p for p in root.iterdir() if p.is_dir() and (p / "scenario.json").is_file()):
        scenario = sdir.name
        if not scenario.isalnum():
            raise TaskError(f"scenario directory {sdir} must be alphanumeric (AppWorld ids are <scenario>_<n>)")
        sc = json.loads((sdir / "scenario.json").read_text())
        evaluation = (sdir / "evaluation.py").read_text()
        solution_t = (sdir / "solution.cells").read_text()
        wrong_t = (sdir / "wrong.cells").read_text() if (sdir / "wrong.cells").is_file() else ""
        for n, var in enumerate(sc["variants"], start=1):
            task_id = f"{scenario}_{n}"
            public = dict(var.get("public_data", {}))
            values = {k: str(v) for k, v in public.items()}
            values.update({f"wrong_{k}": str(v) for k, v in var.get("wrong", {}).items()})
            seed = {k: list(v) for k, v in sc.get("seed", {}).items()}
            for k, v in var.get("seed", {}).items():
                seed.setdefault(k, []).extend(v)
            sup_fields = {**sc.get("supervisor_fields", {}), **var.get("supervisor_fields", {})}
            instruction = _fill(sc["instruction"], values, f"{task_id} instruction")
            solution = tuple(_fill(c, values, f"{task_id} solution") for c in _cells(solution_t))
            wrong = tuple(_fill(c, values, f"{task_id} wrong solution") for c in _cells(wrong_t))
            spec = {"task_id": task_id, "instruction": instruction, "supervisor": common["supervisor"],
                    "datetime": sc.get("datetime", common["datetime"]), "apps": list(sc["apps"]), "seed": seed,
                    "supervisor_fields": sup_fields, "public_data": public,
                    "private_data": var.get("private_data", {}), "answer": var.get("answer"),
                    "evaluation": evaluation, "difficulty": sc.get("difficulty", 1), "solution": list(solution)}
            tasks.append(AppWorldTask(task_id=task_id, scenario=scenario, split=sc["split"], apps=tuple(sc["apps"]),
                                      difficulty=int(sc.get("difficulty", 1)), instruction=instruction,
                                      answer=var.get("answer"), solution=solution, wrong_solution=wrong, spec=spec))
    return tuple(tasks)


@lru_cache(maxsize=1)
def _generated() -> tuple[AppWorldTask, ...]:
    from .suite import DATETIME, SUPERVISOR, generated_specs

    tasks = []
    for scenario, n, d in generated_specs():
        task_id = f"{scenario.id}_{n}"
        spec = {"task_id": task_id, "instruction": d.instruction, "supervisor": SUPERVISOR, "datetime": DATETIME,
                "apps": list(scenario.apps), "seed": d.seed, "supervisor_fields": d.supervisor_fields,
                "public_data": d.public_data, "private_data": d.private_data, "answer": d.answer,
                "evaluation": scenario.evaluation, "difficulty": scenario.difficulty, "solution": list(d.solution)}
        tasks.append(AppWorldTask(task_id=task_id, scenario=scenario.id, split=scenario.split, apps=scenario.apps,
                                  difficulty=scenario.difficulty, instruction=d.instruction, answer=d.answer,
                                  solution=tuple(d.solution), wrong_solution=tuple(d.wrong), spec=spec))
    return tuple(tasks)


def load_tasks(task_dir: str | os.PathLike | None = None) -> tuple[AppWorldTask, ...]:
    """Every task of our suite in a stable order (scenario, then variant): the static scenarios of ``task_dir``
    (default: the ``tasks`` folder beside this module) and, for the default folder, the generated ones."""
    static = _load(str(Path(task_dir) if task_dir else TASK_DIR))
    tasks = static + (_generated() if task_dir is None else ())
    return tuple(sorted(tasks, key=lambda t: (t.scenario, int(t.task_id.rsplit("_", 1)[1]))))


def split_tasks(split: str, task_dir: str | os.PathLike | None = None) -> tuple[AppWorldTask, ...]:
    """The tasks of one of :data:`SPLITS`, round-robin over its scenarios (every scenario's task 1, then every
    task 2...): the first N tasks (``agentgym eval --episodes N``) cover as many scenarios as N allows."""
    if split in RENAMED:
        raise TaskError(f"the AppWorld split {split!r} is now {RENAMED[split]!r} (our suite grew; see the README)")
    if split not in SPLITS:
        raise TaskError(f"unknown split {split!r} of our AppWorld suite; choose from {list(SPLITS)}")
    tasks = load_tasks(task_dir)
    chosen = tasks if split == "gen-all" else tuple(t for t in tasks if t.split == split)
    if not chosen:
        raise TaskError(f"no tasks in our AppWorld split {split!r}")
    return tuple(sorted(chosen, key=lambda t: (int(t.task_id.rsplit("_", 1)[1]), t.scenario)))


def split_task_ids(split: str, task_dir: str | os.PathLike | None = None) -> list[str]:
    return [t.task_id for t in split_tasks(split, task_dir)]


#: The parts of a task's spec that make it the task it is (:func:`task_identity`).
IDENTITY_FIELDS = ("instruction", "supervisor", "datetime", "seed", "supervisor_fields", "public_data",
                   "private_data", "answer", "evaluation")


def task_identity(task: AppWorldTask) -> dict:
    """What makes a task of our suite the task it is, apart from its id: the instruction, the initial state of the
    apps (seed records, supervisor and their fields, the date) and what wins it (public and private data, the answer,
    the evaluation). Not the gold solution's code, the apps list or the level, which follow from these. Two tasks
    with the same identity are the same task; tasks that share an instruction but start from different app states
    are different tasks (``gfileorg_1`` .. ``_6``). An official task: its id (its data is AppWorld's)."""
    if task.official:
        return {"official": task.task_id}
    return {k: task.spec.get(k) for k in IDENTITY_FIELDS}


@dataclass(frozen=True)
class Build:
    """A built task set: ``full_data`` (with ground truth, evaluator only), ``world_data`` (what workers see)."""

    root: Path

    @property
    def full_data(self) -> Path:
        return self.root / "full" / "data"

    @property
    def world_data(self) -> Path:
        return self.root / "world" / "data"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"


def _build_spec(tasks: tuple[AppWorldTask, ...]) -> dict:
    splits: dict[str, list[str]] = {}
    for t in tasks:
        splits.setdefault(t.split, []).append(t.task_id)
    splits["gen-all"] = [t.task_id for t in tasks]
    return {"tasks": [t.spec for t in tasks], "splits": splits}


def _digest(spec: dict) -> str:
    blob = json.dumps(spec, sort_keys=True).encode() + BUILDER_SCRIPT.read_bytes() + APPWORLD_VERSION.encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def suite_digest(tasks: tuple[AppWorldTask, ...] | None = None) -> str:
    """The content hash of a task set (its build's folder name): what results rows record as ``task_set``."""
    return _digest(_build_spec(load_tasks() if tasks is None else tuple(tasks)))


def verify_build(build: Build) -> str | None:
    """What is wrong with a build (a file missing, added or changed since it was built), or None when it is intact."""
    try:
        manifest = json.loads(build.manifest.read_text())
    except (OSError, ValueError) as e:
        return f"its manifest is unreadable ({e})"
    found = {str(p.relative_to(build.root)) for tree in ("full", "world") for p in (build.root / tree).rglob("*")
             if not p.is_dir()}
    if found != set(manifest):
        odd = sorted(found ^ set(manifest))
        return f"{len(odd)} file(s) missing or added, e.g. {odd[0]}"
    for rel, digest in manifest.items():
        h = hashlib.sha256()
        with open(build.root / rel, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != digest:
            return f"{rel} was modified"
    return None


def ensure_build(install: AppWorldInstall, tasks: tuple[AppWorldTask, ...] | None = None,
                 timeout: float = 1800.0, progress: ProgressFn | None = None) -> Build:
    """Build ``tasks`` (default: the whole suite) into the official layout (once per content hash, and again when
    the cached build no longer matches its manifest); return where it is. ``progress`` receives a report per task
    built (the builder prints one line per task; a tenth of them are logged)."""
    tasks = load_tasks() if tasks is None else tuple(tasks)
    spec = _build_spec(tasks)
    digest = _digest(spec)
    out = install.builds_dir / digest
    build = Build(out)
    if build.manifest.is_file() and verify_build(build) is None:
        return build
    install.builds_dir.mkdir(parents=True, exist_ok=True)
    with open(install.builds_dir / f".{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per hash across processes (pytest-xdist, eval grids)
        if build.manifest.is_file():
            problem = verify_build(build)
            if problem is None:
                return build
            logger.warning("the AppWorld build %s is damaged (%s); building it again", out, problem)
        spec_path = install.builds_dir / f".{digest}.spec.json"
        spec_path.write_text(json.dumps(spec))
        t0 = time.monotonic()
        lines = _BuildLines(len(tasks), progress)
        try:
            run_lines([str(install.python), "-I", str(BUILDER_SCRIPT), str(spec_path), str(out)], lines,
                      timeout=timeout, cwd=str(install.builds_dir),
                      env={"PATH": "/usr/bin:/bin", "HOME": str(install.root), "LANG": "C.UTF-8", "TZ": "UTC",
                           "PYTHONHASHSEED": "0"})
        except subprocess.CalledProcessError as e:
            raise EnvCrashError(f"building the AppWorld task set failed (exit {e.returncode}):\n"
                                f"{e.output[-3000:]}") from e
        if not build.manifest.is_file():
            raise EnvCrashError(f"building the AppWorld task set wrote no manifest into {out}")
        spec_path.unlink(missing_ok=True)
        logger.info("built %d AppWorld tasks into %s in %.1fs", len(tasks), out, time.monotonic() - t0)
    return build


class _BuildLines:
    """Reads the builder's output: ``{"progress": "base"}`` once the apps' base databases exist, then
    ``{"built": task_id}`` per task (from its worker processes, in any order)."""

    def __init__(self, total: int, progress: ProgressFn | None):
        self.total, self.progress, self.built = total, progress, 0

    def __call__(self, line: str) -> None:
        if not line.startswith("{"):
            return
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return
        if not isinstance(msg, dict):
            return
        if "built" in msg:
            self.built += 1
            if self.built * 10 // self.total > (self.built - 1) * 10 // self.total:
                logger.info("AppWorld suite: %d/%d tasks built", self.built, self.total)
            report = StepProgress("build tasks", self.built, self.total, str(msg["built"]))
        elif msg.get("progress") == "base":
            logger.info("AppWorld suite: base databases built; building %d tasks", self.total)
            report = StepProgress("build tasks", 0, self.total, "")
        else:
            return
        if self.progress is not None:
            self.progress(report)


def official_root() -> Path | None:
    """``$APPWORLD_ROOT`` when it holds the official data (``data/datasets`` and ``data/tasks``)."""
    env = os.environ.get("APPWORLD_ROOT")
    if not env:
        return None
    root = Path(env).expanduser()
    if (root / "data" / "datasets").is_dir() and (root / "data" / "tasks").is_dir():
        return root
    return None


def official_task_ids(split: str) -> list[str]:
    root = official_root()
    if root is None:
        raise DataNotFoundError("official AppWorld data not found: set APPWORLD_ROOT to a downloaded bundle "
                                "(with data/datasets and data/tasks)")
    path = root / "data" / "datasets" / f"{OFFICIAL_SPLIT_FILES[split]}.txt"
    if not path.is_file():
        raise DataNotFoundError(f"{path} does not exist")
    return [ln.strip().split(":")[0] for ln in path.read_text().splitlines() if ln.strip()]
