"""The environment contract shared by every agentgym environment.

An :class:`AgentEnv` is a ``gymnasium.Env[str, str]`` for one multi-turn text task.

* **Spaces.** Observations and actions are unicode text (:class:`~agentgym.spaces.UnicodeText`).
* **Tasks.** An env plays the tasks of one *split*. ``task_ids(limit=None)`` lists the split's task ids in order
  (the first ``limit``); ``get_task(task_id)`` returns one task. A *generated* split whose env builds task ``i`` on
  demand (ALFWorld's ``generated``) may list no ids of its own: ``task_ids(limit)`` gives ``limit`` ids, and
  without a limit the split's default size where it has one (ALFWorld's ``generated_size``), else it raises
  :class:`~agentgym.errors.TaskError`. A generator whose pool of distinct tasks is finite lists exactly that pool
  (TextCraft's ``gen-depthD``: one task per goal item) and refuses ids past it.
* **Task identity.** ``task_identity(task_id)`` is a digest of what makes a task the task it is, apart from its id
  (each env says what counts: TextCraft the targets, initial inventory and ``get`` rule; ALFWorld the game; AppWorld
  the instruction, initial app state and expected outcome). Within a generated split no two ids share one: a
  generator never repeats a task silently (``tests/contract/test_generated_splits.py``).
* **reset(seed=None, options=None) -> (observation, info).** ``seed`` seeds the env's own ``self.np_random`` (never
  the global RNGs). ``options`` may select a task with *one* of ``{"task_id": "..."}``, ``{"task_index": k}`` (the
  k-th id of ``task_ids()``; any k >= 0 on a generated split) or ``{"task": {...}}`` (an env-specific task dict,
  where the env accepts one). Without one, the task is drawn from the split with ``self.np_random``. The same seed
  and options always give the same episode. An unknown id, an index out of range, a malformed task dict or an
  unknown option raises :class:`~agentgym.errors.TaskError` worded as ``no task 'x' in <Env> split 's'``,
  ``task_index k out of range for <Env> split 's' (n tasks)``, ``unknown reset options [...]; <Env> accepts
  [...]``.
* **step(action) -> (observation, reward, terminated, truncated, info).** ``action`` is the *raw model response*.
  The env parses it: the first well-formed ``<action>...</action>`` body by default (an env may read other tags,
  see ``action_tags``). A response that does not parse, or a command the env does not understand, never raises:
  the observation says what was wrong (an env playing a benchmark's canonical rules shows the canonical env's own
  answer instead, e.g. to the empty command, and says why only in ``info``), ``info["action_valid"]`` is False,
  and ``invalid_action_penalty`` is
  subtracted from the reward (0 by default, so rewards are the benchmark's own; estimators can apply the penalty
  from the ``valid_action`` column instead — use one or the other). A well-formed command that cannot be carried
  out (a craft without its ingredients, an inadmissible move) keeps ``action_valid`` True and sets ``process_ok``
  or ``action_admissible`` False. Whenever one of these three flags a step, ``info["invalid_reason"]`` says why.
* **terminated** means the task reached a natural end (won, or lost for good); **truncated** means the turn budget
  ``max_turns`` ran out first. Never both. Stepping a finished episode raises ``RuntimeError``: call reset.
* **info** carries the keys of :class:`StepInfo` on every reset and step (see there for what each means).
* **Errors.** Failures that are not the agent's fault raise :class:`~agentgym.errors.AgentGymError` subclasses;
  runners turn them (and any other ``Exception``) into typed error records, never into a reward of 0.

Subclasses supply their task data (``_split_task_ids`` and ``_load_task``; ``_task_from_dict``,
``_generated_task_id``, ``_generated_size`` and ``_task_identity`` where they apply), implement ``_start``, ``_execute`` and
``_prompt_fields``, and may override ``admissible_actions``, ``_anchor_text``, ``oracle_action`` and
``random_action``. Task selection itself (ids, indices, draws, errors) is written once, here.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

import gymnasium as gym
import numpy as np

from .errors import TaskError
from .hashing import action_key, obs_hash, stable_digest
from .parsing import ParsedAction, parse_first_tag
from .prompts import PromptTemplate
from .spaces import UnicodeText

__all__ = ["AgentEnv", "StepInfo", "StepOutcome", "INFO_TYPES", "NO_ACTION_KEY", "RULES", "TASK_OPTIONS",
           "check_rules"]

#: ``info["action_key"]`` on reset, before any action.
NO_ACTION_KEY = 0
#: The rule sets an env that plays a benchmark may offer: the canonical benchmark's own, or agentgym's friendlier
#: reading (each env's docstring says what differs).
RULES = ("canonical", "lenient")
#: The ``reset(options=...)`` keys that select a task (at most one of them per reset).
TASK_OPTIONS = ("task_id", "task_index", "task")
#: The range a seed draws a task index from on a generated split without a default size (numpy's int32 range,
#: as TextCraft's generated splits always drew).
_GENERATED_DRAW = 2**31 - 1


def check_rules(rules: str | None) -> None:
    """Raise ``ValueError`` unless ``rules`` is None (the split's default) or one of :data:`RULES`."""
    if rules is not None and rules not in RULES:
        raise ValueError(f"rules must be one of {RULES}, got {rules!r}")


class StepInfo(TypedDict):
    """The ``info`` dict of every reset and step.

    Keys:
        task_id: the task's stable id.
        turn: number of steps taken so far (0 on reset).
        obs_hash: stable 63-bit digest of the normalized current observation (no history): same text, same hash,
            in any process and run.
        action: the parsed action body, or None (nothing parsed, or on reset).
        action_tag: the tag the action was read from (``"action"``...), or None.
        action_key: stable digest of the parsed action; of the response's first tokens when nothing parsed;
            :data:`NO_ACTION_KEY` on reset.
        action_valid: the action parsed and is a well-formed command of this env.
        action_admissible: whether it is in the admissible list; None where the env has no such list.
        admissible_actions: the admissible actions for the *next* step, or None where the env has no list.
        process_ok: the env's verdict on this step's execution (e.g. the craft succeeded); None where it has none.
        invalid_reason: why the action was invalid or failed, for logging (set whenever ``action_valid``,
            ``process_ok`` or ``action_admissible`` is False); None when it went through.
        won: the task is solved.
        score: the benchmark's score in [0, 1] (1.0 for a win in binary tasks).
        progress: fraction of required subgoals reached, or None where the env cannot tell.
        error: a typed failure record (dict of :class:`~agentgym.errors.ErrorRecord`) or None. Envs leave it None;
            runners fill it when the env or policy failed.
    """

    task_id: str
    turn: int
    obs_hash: int
    action: str | None
    action_tag: str | None
    action_key: int
    action_valid: bool
    action_admissible: bool | None
    admissible_actions: list[str] | None
    process_ok: bool | None
    invalid_reason: str | None
    won: bool
    score: float
    progress: float | None
    error: dict | None


#: key -> accepted types (for contract tests and validation).
INFO_TYPES: dict[str, tuple[type, ...]] = {
    "task_id": (str,), "turn": (int,), "obs_hash": (int,), "action": (str, type(None)),
    "action_tag": (str, type(None)), "action_key": (int,), "action_valid": (bool,),
    "action_admissible": (bool, type(None)), "admissible_actions": (list, type(None)),
    "process_ok": (bool, type(None)), "invalid_reason": (str, type(None)), "won": (bool,), "score": (float,),
    "progress": (float, type(None)), "error": (dict, type(None)),
}


@dataclass
class StepOutcome:
    """What an env's ``_execute`` reports for one parsed action."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    valid: bool = True
    admissible: bool | None = None
    process_ok: bool | None = None
    invalid_reason: str | None = None


class AgentEnv(gym.Env[str, str]):
    """Base class of agentgym environments; see the module docstring for the contract."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    #: Tags whose first well-formed occurrence is the action.
    action_tags: ClassVar[tuple[str, ...]] = ("action",)
    prompt_template: ClassVar[PromptTemplate]
    #: True when a step waits on something outside the process or takes milliseconds (a sandbox, a server, an LLM
    #: user, a heavy engine): the episode-asynchronous runner then calls the env on a thread, off its event loop.
    slow_steps: ClassVar[bool] = False

    def __init__(self, *, max_turns: int = 50, invalid_action_penalty: float = 0.0, history_length: int = 2,
                 render_mode: str | None = None):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self.max_turns = int(max_turns)
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.history_length = int(history_length)
        self.render_mode = render_mode
        self.task: Any = None
        self.turn = 0
        self.last_observation = ""
        self.history: list[tuple[str, str]] = []  # (observation shown, parsed action or raw response)
        # (raw response, observation) of every step and the turn-0 prompt: the "transcript" context form
        # (:mod:`agentgym.context`); ``context_form`` None = the rebuilt prompt
        self.context_turns: list[tuple[str, str]] = []
        self.first_prompt: str | None = None
        self.context_form = None
        self._done = True
        self._won = False

    # ---- task data: what each env supplies ----------------------------------------------------------------
    def _split_task_ids(self) -> Sequence[str] | None:
        """The split's task ids in order, or None for a generated split (see ``_generated_task_id``)."""
        raise NotImplementedError

    def _load_task(self, task_id: str) -> Any | None:
        """The task named ``task_id`` (any id the env knows, in this split or not), or None when there is none."""
        raise NotImplementedError

    def _task_from_dict(self, task: Any) -> Any:
        """The task an ``options["task"]`` dict describes; raise TaskError when malformed."""
        raise TaskError(f"{self._env_name()} takes no task dict (options['task']); select a task by task_id or "
                        f"task_index")

    def _generated_task_id(self, index: int) -> str:
        """The id of task ``index`` of a generated split (envs whose ``_split_task_ids`` can be None)."""
        raise NotImplementedError

    def _generated_size(self) -> int | None:
        """How many tasks a generated split lists without a limit, and the range a seed draws from; None when it
        has no default size (then ``task_ids`` needs a limit)."""
        return None

    def _task_identity(self, task: Any) -> Any:
        """What makes ``task`` the task it is, apart from its id, as JSON-serialisable data (see
        :meth:`task_identity`); envs with generated splits define it."""
        raise NotImplementedError(f"{type(self).__name__} defines no task identity")

    # ---- task selection: the contract, written once ---------------------------------------------------------
    def task_ids(self, limit: int | None = None) -> list[str]:
        """The split's task ids in order: the first ``limit`` (all when None). A generated split gives ``limit`` ids,
        and without a limit its default size, or raises :class:`TaskError` when it has none."""
        if limit is not None:
            limit = self._index("limit", limit)
        ids = self._split_task_ids()
        if ids is not None:
            return list(ids) if limit is None else list(ids[:limit])
        if limit is None:
            limit = self._generated_size()
            if limit is None:
                raise TaskError(f"split {self._split_name()!r} is unbounded: give the number of tasks")
        return [self._generated_task_id(i) for i in range(limit)]

    def get_task(self, task_id: str) -> Any:
        """The task named ``task_id``; :class:`TaskError` when the env knows no such task."""
        if isinstance(task_id, (int, np.integer)) and not isinstance(task_id, bool):
            task_id = str(task_id)  # τ's ids are numerals; a client may send them as numbers
        if not isinstance(task_id, str):
            raise TaskError(f"a task id is a string, got {type(task_id).__name__} {task_id!r}")
        task = self._load_task(task_id)
        if task is None:
            raise TaskError(f"no task {task_id!r} in {self._env_name()} split {self._split_name()!r}")
        return task

    def task_identity(self, task_id: str) -> str:
        """A digest (16 hex digits) of what makes task ``task_id`` the task it is, apart from its id: two ids with the
        same identity name the same task. Within a generated split no two ids share one. ``NotImplementedError``
        for an env that defines no identity."""
        key = json.dumps(self._task_identity(self.get_task(task_id)), sort_keys=True, ensure_ascii=False)
        return f"{stable_digest(key, namespace='task-identity'):016x}"

    def current_task_id(self) -> str | None:
        """The id of the task being played (None before the first reset)."""
        return None if self.task is None else self._task_id(self.task)

    def _select_task(self, options: dict) -> Any:
        """The task ``options`` names, or one drawn from the split with ``self.np_random``."""
        unknown = set(options) - set(TASK_OPTIONS)
        if unknown:
            accepted = sorted(TASK_OPTIONS)
            raise TaskError(f"unknown reset options {sorted(unknown)}; {self._env_name()} accepts {accepted}")
        given = [k for k in TASK_OPTIONS if k in options]
        if len(given) > 1:
            raise TaskError(f"reset options {given} each select a task; give one")
        if "task" in options:
            return self._task_from_dict(options["task"])
        if "task_id" in options:
            return self.get_task(options["task_id"])
        ids = self._split_task_ids()
        if "task_index" in options:
            index = self._index("task_index", options["task_index"])
            if ids is None:
                return self.get_task(self._generated_task_id(index))
            if index >= len(ids):
                raise TaskError(f"task_index {index} out of range for {self._env_name()} split "
                                f"{self._split_name()!r} ({len(ids)} tasks)")
            return self.get_task(ids[index])
        if ids is None:
            size = self._generated_size()
            return self.get_task(self._generated_task_id(int(self.np_random.integers(size or _GENERATED_DRAW))))
        if not ids:
            raise TaskError(f"{self._env_name()} split {self._split_name()!r} has no tasks")
        return self.get_task(ids[int(self.np_random.integers(len(ids)))])

    def _env_name(self) -> str:
        return type(self).__name__.removesuffix("Env")

    def _split_name(self) -> str:
        return str(getattr(self, "split", "default"))

    @staticmethod
    def _index(name: str, value: Any) -> int:
        """``value`` as a non-negative int (an int, a numpy integer or a string of digits), else TaskError."""
        try:
            index = int(value) if isinstance(value, str) else operator.index(value)
        except (TypeError, ValueError):
            raise TaskError(f"{name} must be a non-negative integer, got {value!r}") from None
        if isinstance(value, bool) or index < 0:
            raise TaskError(f"{name} must be a non-negative integer, got {value!r}")
        return index

    # ---- hooks for subclasses -----------------------------------------------------------------------------

    def _start(self, task: Any) -> str:
        """Set up the episode's state for ``task``; return the first observation."""
        raise NotImplementedError

    def _execute(self, command: str, parsed: ParsedAction) -> StepOutcome:
        """Apply one parsed command."""
        raise NotImplementedError

    def _prompt_fields(self) -> dict[str, Any]:
        """Env-specific placeholders of the prompt template (``task`` at least)."""
        raise NotImplementedError

    def _task_id(self, task: Any) -> str:
        return str(task.task_id)

    def _anchor_text(self) -> str:
        """The text ``obs_hash`` digests: the current observation (envs whose feedback is not a state extend it)."""
        return self.last_observation

    def is_won(self) -> bool:
        return self._won

    def score(self) -> float:
        """The benchmark score in [0, 1]; binary tasks score their win."""
        return 1.0 if self._won else 0.0

    def progress(self) -> float | None:
        return None

    def admissible_actions(self) -> list[str] | None:
        return None

    def task_metadata(self) -> dict[str, Any]:
        """JSON-serialisable facts about the current task for summaries (``family``, ``depth``...)."""
        return {}

    def run_identity(self) -> dict[str, Any]:
        """JSON-serialisable settings that change what this env's scores *mean* (TextCraft's ``rules``, τ's
        ``task_set``...), resolved to their effective values (a default included, so a run never depends on which
        default was current when it ran). ``agentgym eval`` writes them into every results row as top-level fields,
        shows them in every table, and refuses to resume a results file written under other values. Empty by
        default."""
        return {}

    @classmethod
    def native_tools(cls) -> list[dict] | None:
        """The OpenAI-format function schemas of the tools this env's ``<tool_call>`` tag accepts (τ's airline
        tools), or None for an env whose actions are text commands. Chat-form exports and trainer bridges
        (:mod:`agentgym.chat`) expose these tools by name; text envs get one ``act`` tool instead."""
        return None

    def oracle_action(self) -> str:
        """A response (with tags) of a privileged expert for the current state."""
        raise NotImplementedError(f"{type(self).__name__} has no oracle policy")

    def random_action(self, rng: np.random.Generator) -> str:
        """A response (with tags) drawn uniformly from plausible commands, with the *caller's* rng."""
        adm = self.admissible_actions()
        if adm:
            return f"<action>{adm[int(rng.integers(len(adm)))]}</action>"
        raise NotImplementedError(f"{type(self).__name__} has no random policy")

    # ---- the gymnasium API --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, StepInfo]:
        super().reset(seed=seed)
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise TaskError(f"options must be a dict or None, got {type(options).__name__}")
        self.task = self._select_task(options)
        self.turn = 0
        self.history = []
        self.context_turns = []
        self.first_prompt = None
        self._won = False
        self.last_observation = self._start(self.task)
        self._done = False
        return self.last_observation, self._info(None, "", None)

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:
        if self._done:
            raise RuntimeError("this episode has finished (or never started): call reset() before step()")
        shown = self.last_observation
        parsed = parse_first_tag(action, self.action_tags) if isinstance(action, str) else \
            ParsedAction(None, None, f"the action must be a string, got {type(action).__name__}")
        raw = action if isinstance(action, str) else repr(action)
        if parsed.ok:
            outcome = self._execute(parsed.body, parsed)
        else:
            outcome = StepOutcome(observation=self._invalid_observation(parsed.problem), valid=False,
                                  invalid_reason=parsed.problem)
        self.turn += 1
        reward = float(outcome.reward) - (0.0 if outcome.valid else self.invalid_action_penalty)
        terminated = bool(outcome.terminated)
        truncated = (not terminated) and self.turn >= self.max_turns
        self._done = terminated or truncated
        self.history.append((shown, parsed.body if parsed.ok else raw[:200]))
        self.context_turns.append((raw, outcome.observation))
        self.last_observation = outcome.observation
        return outcome.observation, reward, terminated, truncated, self._info(parsed, raw, outcome)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.last_observation
        return None

    # ---- prompts ------------------------------------------------------------------------------------------
    def prompt(self, history_length: int | None = None) -> str:
        """The model-facing prompt for the current state (Appendix J contract)."""
        hl = self.history_length if history_length is None else history_length
        return self.prompt_template.render(history=self.history, history_length=hl, step=self.turn,
                                           current_observation=self.last_observation, **self._prompt_fields())

    # ---- helpers ------------------------------------------------------------------------------------------
    def _invalid_observation(self, problem: str | None) -> str:
        tags = " or ".join(f"<{t}>...</{t}>" for t in self.action_tags)
        return f"Invalid action: {problem}. Put exactly one command inside {tags}."

    def _info(self, parsed: ParsedAction | None, raw: str, outcome: StepOutcome | None) -> StepInfo:
        adm = self.admissible_actions()
        return StepInfo(
            task_id=self._task_id(self.task), turn=self.turn, obs_hash=obs_hash(self._anchor_text()),
            action=parsed.body if parsed else None, action_tag=parsed.tag if parsed else None,
            action_key=action_key(parsed.body, raw) if parsed is not None else NO_ACTION_KEY,
            action_valid=bool(outcome.valid) if outcome else True,
            action_admissible=outcome.admissible if outcome else None,
            admissible_actions=list(adm) if adm is not None else None,
            process_ok=outcome.process_ok if outcome else None,
            invalid_reason=outcome.invalid_reason if outcome else None,
            won=bool(self.is_won()), score=float(self.score()), progress=self.progress(), error=None)
