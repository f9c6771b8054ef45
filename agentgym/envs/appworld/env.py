"""AppWorld-v0: do a supervisor's task in the real AppWorld apps by writing Python code cells.

* **Action**: a Python code cell in ``<code>...</code>`` (or ``<action>...</action>``), run by AppWorld's own
  ``AppWorld.execute`` in a sandboxed worker (:mod:`.sandbox`: bubblewrap, its own namespaces, Landlock, seccomp).
  The cell sees ``apis`` (``apis.<app>.<api>(...)``), as in AppWorld's own agents; API docs are on demand through
  ``apis.api_docs``. Every API call goes down the episode's API channel to a trusted API process that holds the
  task's world (:mod:`.pool`); the worker holds no database.
* **Observation**: the cell's output. ``process_ok`` is False exactly when AppWorld reports a failed execution
  (every failure starts with :data:`FAILURE_MARKER`: syntax error, runtime error, unknown API, HTTP 4xx, blocked
  import, timeout, step cap).
* **End**: ``terminated`` when the task is marked complete (``apis.supervisor.complete_task(...)``; asked of the API
  process after every cell, never of the worker); ``truncated`` at ``max_turns``. Either way the API process saves the
  world's state and a *fresh process* that never ran agent code evaluates it (:func:`.evaluation.run_evaluator`): reward
  1.0 and ``won`` when every check passes (task goal completion, TGC); ``progress`` is the fraction of checks passed;
  ``info["evaluation"]`` lists each check's pass/fail and ``info["api_calls"]`` the calls per app.
  ``info["scenario_id"]`` names the scenario: scenario goal completion (SGC) is the fraction of scenarios all of whose
  tasks were won (:func:`agentgym.eval.summary.scenario_goal_completion`; per difficulty level in ``agentgym eval``).
* **Agent code that breaks its processes** is a failed task, never an error (an agent must not be able to make a
  failing episode vanish from TGC/SGC): once a code cell has been sent to a worker, the worker dying, hanging past
  its wall-clock limit, answering with an error or flooding its reply pipe (a line over 32 MiB; forged lines are
  skipped), or the API process failing to answer, ends the episode at once: ``terminated``, ``process_ok`` False,
  reward 0, ``won`` False, ``info["agent_failure"]`` an :class:`~agentgym.errors.ErrorRecord` of kind ``agent_code``.
  The world's state is still evaluated (so ``info["evaluation"]`` shows what the agent had done) with one more,
  failed, check. A state the evaluator cannot use (too large, malformed, not plain row changes, not loading, making
  the evaluation raise or run past :attr:`.sandbox.SandboxLimits.evaluation_seconds`) is a scored failure too, with
  ``info["evaluation"]["state_error"]`` naming it and ``info["agent_failure"]`` of stage ``evaluate``.
* **Errors** (not scored, as for every env): a machine that cannot provide a sandbox layer raises
  :class:`.sandbox.SandboxUnavailableError` at construction (unless ``unsafe=`` allows it); a worker or API process
  that fails to start or dies before the worker was sent any code raises :class:`~agentgym.errors.EnvCrashError`,
  one that hangs then :class:`~agentgym.errors.EpisodeTimeoutError`; an evaluation that fails for a reason that is not
  the state (a damaged build) :class:`.evaluation.EvaluationError`. Every episode runs in a fresh worker and a fresh API
  process (forked from servers that have AppWorld imported, :mod:`.pool`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from ...core import AgentEnv, StepInfo, StepOutcome
from ...errors import AGENT_CODE, AgentGymError, EpisodeTimeoutError, ErrorRecord, TaskError
from ...parsing import ParsedAction
from ...prompts import PromptTemplate
from . import OFFICIAL_SPLITS, OUR_SPLITS
from .evaluation import EvaluationError, EvaluationTimeoutError, run_evaluator
from .pool import EXPERIMENT, ApiProcess, Worker, WorkerSpec, get_pool
from .sandbox import SandboxLimits, allowed_missing, probe, sandbox_mode, unsafe_from_env
from .install import require_install
from .tasks import (RENAMED, AppWorldTask, Build, ensure_build, load_tasks, official_root, official_task_ids,
                    scenario_of, split_tasks, suite_digest, task_identity)

__all__ = ["AppWorldEnv", "FAILURE_MARKER", "is_failure"]

logger = logging.getLogger(__name__)

#: AppWorld prefixes every failed execution with this.
FAILURE_MARKER = "Execution failed."

_INSTRUCTION = (
    "Write Python code cells that use the `apis` object to act in the apps: call `apis.<app>.<api>(**params)`. "
    "Look the APIs up when you need them: `apis.api_docs.show_app_descriptions()`, "
    "`apis.api_docs.show_api_descriptions(app_name=...)`, `apis.api_docs.show_api_doc(app_name=..., "
    "api_name=...)`. Your supervisor's passwords are in `apis.supervisor.show_account_passwords()`. Variables "
    "persist between cells; print what you want to see. When the task is done, call "
    "`apis.supervisor.complete_task()` -- with `answer=...` if the task asks a question.\n"
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
    "within <think> </think> tags.\n"
    "Then give exactly one Python code cell within <code> </code> tags."
)
_HEAD = ("You are an AI assistant who performs tasks for your supervisor, {supervisor}, in the apps on their "
         "phone, by writing Python code.\nToday is {today}.\nTask: {task}\n")
_TEMPLATE = PromptTemplate(
    first=_HEAD + "Your current observation is:\n{current_observation}\n" + _INSTRUCTION,
    with_history=_HEAD + "Prior to this step, you have already taken {step_count} step(s). Below are the most "
    "recent {history_length} observations and the corresponding code you ran:\n{action_history}\n"
    "You are now at step {current_step} and your current observation is:\n{current_observation}\n" + _INSTRUCTION,
)

# Exploration cells of the random policy: read-only and deterministic.
_RANDOM_APPS = ("simple_note", "venmo", "todoist", "spotify", "gmail", "supervisor")


def is_failure(output: str) -> bool:
    """Whether an AppWorld execution output reports a failure."""
    return output.lstrip().startswith(FAILURE_MARKER)



class AppWorldEnv(AgentEnv):
    """AppWorld-v0; see the module docstring.

    Args:
        split: ``gen-train``/``gen-dev``/``gen-test``/``gen-all`` (our generated suite) or an official split
            (``train``, ``dev``, ``test_normal``, ``test_challenge``: needs ``APPWORLD_ROOT``).
        root: the AppWorld install root (default: ``$AGENTGYM_APPWORLD_HOME`` or ``~/.cache/agentgym/appworld``).
        task_dir: our task definitions (default: the ``task_definitions`` folder beside this module).
        limits: sandbox limits of the workers.
        max_interactions: AppWorld's own cap on the cells a world executes (past it every cell fails).
        spares: workers kept forked ahead of need.
        unsafe: run agent code although this machine lacks sandbox layers: ``True`` (any), or the names of the
            layers that may be missing (:data:`.sandbox.LAYERS`); a warning names them and results rows record it.
            ``None`` (the default) reads ``AGENTGYM_APPWORLD_UNSAFE`` (the command line's spelling), unset meaning
            False: a missing layer makes the constructor raise :class:`.sandbox.SandboxUnavailableError`.
        max_turns, invalid_action_penalty, history_length, render_mode: see :class:`~agentgym.core.AgentEnv`.
    """

    #: The async runner calls this env off its event loop (code cells run in a sandboxed interpreter process).
    slow_steps = True

    action_tags = ("code", "action")
    prompt_template = _TEMPLATE

    def __init__(self, split: str = "gen-test", *, root: str | os.PathLike | None = None,
                 task_dir: str | os.PathLike | None = None, limits: SandboxLimits | None = None,
                 max_interactions: int = 1000, spares: int = 1, unsafe: bool | str | tuple | None = None,
                 max_turns: int = 30, invalid_action_penalty: float = 0.0, history_length: int = 2,
                 render_mode: str | None = None):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if split in RENAMED:
            raise TaskError(f"the AppWorld split {split!r} is now {RENAMED[split]!r} (our suite grew; see the README)")
        if split not in OUR_SPLITS and split not in OFFICIAL_SPLITS:
            raise TaskError(f"unknown AppWorld split {split!r}; choose from {[*OUR_SPLITS, *OFFICIAL_SPLITS]}")
        self.split = split
        self.install = require_install(root)
        self.official = split in OFFICIAL_SPLITS
        self._task_dir = task_dir
        self.limits = limits or SandboxLimits()
        self.max_interactions = int(max_interactions)
        self.spares = spares
        self.unsafe = unsafe_from_env() if unsafe is None else unsafe
        self._allowed_missing = allowed_missing(self.unsafe)
        # What this machine can provide; refuse now (SandboxUnavailableError) unless unsafe allows what is missing.
        self.sandbox_report = probe(str(self.install.python), str(self.install.scratch_dir))
        self.sandbox = sandbox_mode(self.sandbox_report, self.unsafe)
        self._all_tasks: tuple[AppWorldTask, ...] = ()
        if self.official:
            self._tasks = tuple(AppWorldTask(task_id=t, scenario=scenario_of(t), split=split, official=True)
                                for t in official_task_ids(split))
        else:
            self._all_tasks = load_tasks(task_dir)  # built together: one build serves every split
            self._tasks = split_tasks(split, task_dir)
        self._by_id = {t.task_id: t for t in self._tasks}
        self._build: Build | None = None
        self._worker: Worker | None = None
        self._api: ApiProcess | None = None
        self._api_calls: dict | None = None
        self._reset_info: dict = {}
        self._evaluation: dict | None = None
        self._progress: float | None = None
        self._agent_failure: dict | None = None

    # ---- tasks --------------------------------------------------------------------------------------------
    # Task data for the contract's selection (agentgym.core).
    def _split_task_ids(self) -> list[str]:
        return [t.task_id for t in self._tasks]

    def _load_task(self, task_id: str) -> AppWorldTask | None:
        return self._by_id.get(task_id)

    def _task_identity(self, task: AppWorldTask) -> dict:
        return task_identity(task)

    # ---- data and workers ---------------------------------------------------------------------------------
    def _paths(self) -> tuple[str, str, str | None]:
        """(world data the API process loads from, full data the evaluator reads, manifest or None)."""
        if self.official:
            root = official_root()
            assert root is not None
            data = str(root / "data")
            # Official bundles keep each task's ground truth beside its inputs (data/tasks/<id>/ground_truth): only
            # the trusted API process (which loads the task's world from this tree) and the evaluator read it; the
            # agent's sandbox holds no data at all.
            return data, data, None
        if self._build is None:
            self._build = ensure_build(self.install, self._all_tasks)
        return str(self._build.world_data), str(self._build.full_data), str(self._build.manifest)

    def _spec(self) -> WorkerSpec:
        world, _, _ = self._paths()
        return WorkerSpec(python=str(self.install.python), world_data=world,
                          scratch_dir=str(self.install.scratch_dir), limits=self.limits,
                          use_bwrap=self.sandbox_report.bwrap, allowed_missing=self._allowed_missing)

    def _drop_worker(self) -> None:
        """Kill the current worker and API process and delete the API process's workspace (one episode per
        process pair)."""
        for name in ("_worker", "_api"):
            child = getattr(self, name)
            setattr(self, name, None)
            if child is not None:
                child.dispose()

    def __del__(self) -> None:
        # Never a call to a fork server here: the garbage collector may run this inside one (its lock is not
        # reentrant). The pool disposes of the processes later.
        for name in ("_worker", "_api"):
            child = getattr(self, name, None)
            if child is not None:
                setattr(self, name, None)
                try:
                    child.abandon()
                except Exception:  # noqa: BLE001 - interpreter shutdown; the pool's atexit hook cleans up
                    pass

    def close(self) -> None:
        self._drop_worker()
        super().close()

    # ---- episode ------------------------------------------------------------------------------------------
    def _start(self, task: AppWorldTask) -> str:
        self._evaluation = None
        self._progress = None
        self._agent_failure = None
        self._api_calls = None
        self._drop_worker()  # fresh processes per episode: no process ever hosts a second world
        spec = self._spec()
        worker = self._worker = get_pool(spec, spares=self.spares).acquire()
        try:
            api = self._api = ApiProcess(spec, task.task_id, worker.take_api_peer())
            reply = api.start()
            worker.request("reset", timeout=self.limits.start_seconds, task_id=task.task_id, experiment=EXPERIMENT,
                           datetime=reply["datetime"], api_table=api.server.api_table(),
                           max_interactions=self.max_interactions, timeout_seconds=self.limits.cell_timeout_seconds)
        except AgentGymError:
            self._drop_worker()
            raise
        sup = reply["supervisor"]
        self._reset_info = {"supervisor": f"{sup['first_name']} {sup['last_name']} ({sup['email']}, "
                                          f"phone {sup['phone_number']})",
                            "instruction": reply["instruction"], "today": reply["datetime"]}
        return (f"Task from your supervisor {sup['first_name']} {sup['last_name']}: {reply['instruction']}\n"
                "Use Python code with the `apis` object; call apis.supervisor.complete_task() when done.")

    def _execute(self, command: str, parsed: ParsedAction) -> StepOutcome:
        worker, api = self._worker, self._api
        if worker is None or api is None:
            raise TaskError("no live worker: call reset()")
        try:
            reply = worker.request("execute", code=command)
        except AgentGymError as e:
            if not worker.tainted:  # it died before it was sent any code: not the agent's doing
                self._drop_worker()
                raise
            return self._agent_broke(e, "the process running your code", worker.status)
        output = reply.get("output")
        output = output if isinstance(output, str) else str(output)
        # Whether the task was marked complete: asked of the API process, never of the agent's process.
        try:
            completed = bool(api.request("completed", timeout=self.limits.wall_seconds_per_request)["completed"])
        except AgentGymError as e:
            return self._agent_broke(e, "the app server your code called", api.status)
        failed = is_failure(output)
        return StepOutcome(observation=output, terminated=completed, process_ok=not failed,
                           invalid_reason=output.strip().splitlines()[-1][:300] if failed and output.strip() else None)

    def _agent_broke(self, error: AgentGymError, who: str, status: str | None) -> StepOutcome:
        """The agent's code killed, hung or garbled its worker or its API process: end the episode as a failure (see
        the docstring)."""
        if self._worker is not None:
            self._worker.kill()  # stop anything still running before the state is saved
        if isinstance(error, EpisodeTimeoutError):
            what = f"did not finish within {self.limits.wall_seconds_per_request:.0f}s and was killed"
        else:
            what = f"ended abnormally ({status})"
        logger.info("AppWorld task %s: the agent's code broke %s: %s", self.task.task_id, who, error)
        self._agent_failure = ErrorRecord(kind=AGENT_CODE, stage="step", message=str(error),
                                          exception=type(error).__name__).to_dict()
        reason = f"{who} {what}; the episode ends here"
        return StepOutcome(observation=f"{FAILURE_MARKER} Traceback:\n{reason[0].upper()}{reason[1:]}.",
                           terminated=True, process_ok=False, invalid_reason=reason)

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated or truncated:
            self._evaluate()
            won = bool(self._evaluation and self._evaluation["success"])
            self._won = won
            reward += 1.0 if won else 0.0
            info["won"], info["score"], info["progress"] = won, self.score(), self.progress()
            info["evaluation"] = self._evaluation
            info["agent_failure"] = self._agent_failure  # type: ignore[typeddict-unknown-key]
            info["api_calls"] = self._api_calls  # type: ignore[typeddict-unknown-key]
        return obs, reward, terminated, truncated, info

    def _state_failure(self, kind: str, message: str, stage: str = "evaluate") -> dict:
        """A scored failure of the episode's state (see :mod:`.in_venv.evaluator`): recorded as the agent's doing."""
        if self._agent_failure is None:
            self._agent_failure = ErrorRecord(kind=AGENT_CODE, stage=stage, message=message,
                                              exception=kind).to_dict()
        return {"success": False, "num_tests": 1, "passes": [], "tampered": True,
                "state_error": {"type": kind, "message": message},
                "failures": [{"requirement": "the world's state could be saved and evaluated",
                              "trace": f"{kind}: {message}"[:2000]}]}

    def _evaluate(self) -> None:
        worker, api = self._worker, self._api
        if worker is None or api is None:
            raise TaskError("no live worker to evaluate")
        try:
            worker.kill()  # no more API calls: the world's state is final
            result = None
            try:
                saved = api.request("save", timeout=self.limits.wall_seconds_per_request)
                calls = saved.get("api_calls")
                self._api_calls = {str(k): int(v) for k, v in calls.items()} if isinstance(calls, dict) else None
            except AgentGymError as e:
                result = self._state_failure("state_not_saved", f"the app server could not save the world's state: "
                                             f"{str(e)[:1500]}")
            api.kill()
            if result is None:
                _, full, manifest = self._paths()
                try:
                    result = run_evaluator(str(self.install.python), full, manifest, self.task.task_id,
                                           api.state_dir, str(self.install.scratch_dir),
                                           timeout=self.limits.evaluation_seconds)
                except EvaluationTimeoutError as e:
                    # The state is the agent's doing (its API calls grew it): a scored failure, with a WARNING all
                    # the same, since a badly overloaded machine could cause it too.
                    logger.warning("AppWorld task %s: %s", self.task.task_id, e)
                    result = self._state_failure("evaluation_timeout", str(e))
                except EvaluationError as e:
                    if self._agent_failure is None:
                        raise
                    logger.warning("AppWorld task %s: the state left by the broken episode was not evaluated: %s",
                                   self.task.task_id, e)
                    result = self._state_failure("state_not_evaluated", str(e))
                if result.get("state_error") and self._agent_failure is None:
                    err = result["state_error"]
                    self._agent_failure = ErrorRecord(kind=AGENT_CODE, stage="evaluate",
                                                      message=str(err.get("message", ""))[:2000],
                                                      exception=str(err.get("type", "state_error"))).to_dict()
        finally:
            self._drop_worker()
        checks = [{"requirement": p["requirement"], "passed": True} for p in result["passes"]]
        checks += [{"requirement": f["requirement"], "passed": False, "trace": f.get("trace", "")}
                   for f in result["failures"]]
        n, success = int(result["num_tests"]), bool(result["success"])
        if self._agent_failure is not None and self._agent_failure["stage"] == "step":
            checks.append({"requirement": "the agent's code left its processes running (no crash, hang or garbage)",
                           "passed": False, "trace": self._agent_failure["message"][:2000]})
            n, success = n + 1, False
        self._progress = sum(c["passed"] for c in checks) / max(1, n)
        self._evaluation = {"success": success, "num_tests": n, "tgc": 1.0 if success else 0.0, "checks": checks,
                            "tampered": bool(result.get("tampered")), "state_error": result.get("state_error")}

    def progress(self) -> float | None:
        return self._progress

    def task_metadata(self) -> dict[str, Any]:
        """``scenario_id`` (for SGC in eval summaries), also the ``family`` column; ``apps`` the gold solution uses;
        ``difficulty`` (1-3, AppWorld's levels; None for official tasks, whose level is in their ground truth)."""
        scenario = scenario_of(self._task_id(self.task))
        return {"family": scenario, "scenario_id": scenario, "apps": list(getattr(self.task, "apps", ()) or ()),
                "difficulty": getattr(self.task, "difficulty", None)}

    def run_identity(self) -> dict[str, Any]:
        """``task_set`` (our suite's content digest, or the official data) and ``sandbox`` (``full``, or what an
        ``unsafe=`` run was missing)."""
        task_set = "appworld-official" if self.official else f"agentgym-suite:{suite_digest(self._all_tasks)}"
        return {"task_set": task_set, "sandbox": self.sandbox}

    def _info(self, parsed, raw, outcome) -> StepInfo:
        info = super()._info(parsed, raw, outcome)
        info["scenario_id"] = scenario_of(self._task_id(self.task))  # type: ignore[typeddict-unknown-key]
        info["evaluation"] = None  # type: ignore[typeddict-unknown-key]
        info["agent_failure"] = self._agent_failure  # type: ignore[typeddict-unknown-key]
        return info

    def _prompt_fields(self) -> dict[str, Any]:
        return {"task": self._reset_info.get("instruction", ""),
                "supervisor": self._reset_info.get("supervisor", ""), "today": self._reset_info.get("today", "")}

    # ---- policies -----------------------------------------------------------------------------------------
    def oracle_action(self) -> str:
        """The next cell of the task's gold solution (turn k runs cell k; the last cell completes the task)."""
        task: AppWorldTask = self.task
        if not task.solution:
            raise NotImplementedError("official tasks have no gold solution loaded here")
        return f"<code>\n{task.solution[min(self.turn, len(task.solution) - 1)]}\n</code>"

    def random_action(self, rng: np.random.Generator) -> str:
        """A read-only exploration cell drawn with the caller's ``rng`` (never completes the task)."""
        app = _RANDOM_APPS[int(rng.integers(len(_RANDOM_APPS)))]
        cells = ("print(apis.api_docs.show_app_descriptions())",
                 f"print(apis.api_docs.show_api_descriptions(app_name={app!r}))",
                 "print(apis.supervisor.show_active_task())",
                 "print(apis.supervisor.show_profile())",
                 f"print(apis.api_docs.show_api_doc(app_name={app!r}, api_name='login'))",
                 f"print(apis.{app}.no_such_api())")
        return f"<code>{cells[int(rng.integers(len(cells)))]}</code>"


