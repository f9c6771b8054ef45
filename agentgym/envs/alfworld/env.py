"""ALFWorld-v0: ALFRED household tasks in text, played on the real ALFWorld/TextWorld PDDL engine.

One env instance plays one game at a time (:class:`~.engine.Engine`: TextWorld's ``PddlEnv`` with alfworld's
``AlfredDemangler``/``AlfredInfos`` wrappers, the ``alfred.pddl`` domain and ``alfred.twl2`` grammar of the game file).
Select a game with ``reset(options={"task_id": ...})`` (``"file:<path>"`` names a ``game.tw-pddl`` file or its
folder), ``{"task_index": i}``, or let ``reset(seed=...)`` draw
one of the split with ``self.np_random``.

Commands are ALFWorld's (``go to X``, ``open X``, ``close X``, ``take X from Y``, ``move X to Y``, ``heat/cool/clean X
with Y``, ``use X``, ``examine X``, ``look``, ``inventory``, ``help``), read from the first ``<action>...</action>``.
How a command is matched is the ``rules`` option (a run's identity: :meth:`ALFWorldEnv.run_identity`):

* ``rules="canonical"`` (the default on every split, official and generated): exactly alfworld 0.4.2's
  ``AlfredTWEnv``. TextWorld's ``PddlEnv.step`` strips the command (``str.strip``) and looks it up *exactly* in the
  admissible commands; anything else -- other letter case, doubled, Unicode or tab spaces inside, a final period,
  the older ``put X in/on Y`` wording, the empty command -- is answered ``Nothing happens.`` and changes nothing.
  The observation is always the engine's text; why a command was not run goes only into ``info``
  (``invalid_reason``, with a did-you-mean where the lenient reading would have run it). A response without a
  parsable ``<action>`` tag is played as the empty command, so the agent reads ``Nothing happens.``.
* ``rules="lenient"``: agentgym's friendlier reading. Case, runs of whitespace and a trailing period are ignored, the
  older ``put X in/on Y`` is read as ``move X to Y``, a text that is no ALFWorld command at all is answered
  ``Nothing happens. (Invalid action: ...)``, and an unparsable response gets agentgym's parse-error text.

Under both rules:

* An admissible command runs in the engine: ``process_ok`` True, the engine's feedback is the observation.
* A command that is not run gets the engine's reply ``Nothing happens.`` and changes nothing (``action_admissible``
  and ``process_ok`` False); ``action_valid`` says whether its normalized text has the shape of an ALFWorld command
  (so ``dance wildly`` is invalid and ``go to nowhere 7`` or ``GO TO CABINET 8`` are valid), which is what
  ``invalid_action_penalty`` reads.

Reward 1.0 on the step that wins (the engine's ``won``: the PDDL goal holds), then ``terminated``; 0 otherwise.
``info`` adds ``family`` (the papers' column: Pick, Look, Clean, Heat, Cool, Pick2) and ``task_type`` (ALFWorld's
name, e.g. ``pick_heat_then_place_in_recep``) to the contract keys; ``admissible_actions`` is the engine's list without
``help`` (as verl-agent's prompt lists it; ``help`` itself still runs); ``progress`` is the fraction of the family's
goal conditions that hold (e.g. heat: an object of the target type is hot; a hot one is in the target receptacle
type), 1.0 once won.

``obs_hash`` is :func:`agentgym.hashing.obs_hash` of one text: the observation this step returned (the engine's
feedback, or the invalid-action note), a newline, then the engine's *dynamic* facts, one per line, sorted, each its
predicate and arguments (the game's PDDL names) joined by spaces, e.g. ``inreceptacle <object> <receptacle>``. The
dynamic predicates are exactly ``atlocation`` (where the agent is), ``holds`` and ``holdsany`` (what it holds,
whether it holds anything), ``inreceptacle`` and ``inreceptacleobject`` (where each object is, incl. objects inside
objects), ``opened``, ``isclean``, ``ishot``, ``iscool``, ``istoggled``, ``issliced`` and ``ison``. Before hashing,
the text is normalized (NFC, lower-cased, runs of whitespace collapsed to one space). So ``Nothing happens.`` (or a
repeated ``You arrive at ...``) in two different states hashes differently, while the same observation in the same
state hashes the same.
Everything else is left out: static facts (types, affordances such as ``openable``, receptacle locations),
``objectatlocation`` (it changes only together with ``holds``/``inreceptacle``), the bookkeeping facts ``checked``
and ``examined``, the turn and the history.

Prompts: :mod:`.prompts` (BiPACE Appendix J); ``react_examples=k`` prepends ReAct few-shot examples, which need
ReAct's prompt files as data (``alfworld/prompts/``, staged in the shared data; otherwise a DataNotFoundError when
the env is built that says where to get them). ``prompt_style="verl-agent"`` (or ``"verl-agent-gigpo"``, see
:mod:`agentgym.prompts`) renders verl-agent's ALFWorld templates byte for byte, filled as its
``AlfWorldEnvironmentManager`` fills them: the first step shows the reset observation (no task line), later steps
the task, the last ``history_length`` ``[Observation k: '...', Action k: '...']`` lines, where the action is
verl-agent's projection of the response (:func:`agentgym.prompts.verl_agent_action`, lower-cased, or its last 30
characters when it has no ``<action>`` tag), and the admissible commands without ``help``, each quoted, joined by a
newline and a space.

Splits: ``generated`` (default; see :mod:`.games`), ``train``, ``valid_seen``, ``valid_unseen`` (official files under
``data_path`` or ``$ALFWORLD_DATA``). The oracle is alfworld's expert (:mod:`.oracle`); the random policy draws from
the admissible commands. Every remaining difference from ``AlfredTWEnv`` is listed, with its reason, in this
package's README.md; ``tests/conformance/test_alfworld_conformance.py`` plays both in lockstep.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ...core import RULES, AgentEnv, StepInfo, StepOutcome, check_rules
from ...errors import TaskError
from ...parsing import ParsedAction
from ...prompts import check_prompt_style, verl_agent_action
from .engine import Engine, EngineState, require_engine
from .games import (GENERATED_LIMIT, GENERATED_SEED, GENERATED_SIZE, OFFICIAL_SPLITS, GameRecord, family_of_folder,
                    generated_game, official_split_dir, scan_games)
from .oracle import OracleState, random_admissible
from .prompts import ALFWORLD_TEMPLATE, VERL_AGENT_TEMPLATES
from .prompts import react_examples as react_examples_text
from .scenes import FAMILIES, FAMILY_SHORT

__all__ = ["ALFWorldEnv", "SPLITS", "RULES", "default_rules"]

logger = logging.getLogger(__name__)

SPLITS = ("generated",) + OFFICIAL_SPLITS
# RULES (from core, re-exported): how commands are matched (see the module docstring): ALFWorld's exact match,
# or agentgym's friendlier reading.
#: The engine's answer to any command that is not admissible (TextWorld's ``PddlEnv.step``).
NOTHING_HAPPENS = "Nothing happens."
_GEN_ID = re.compile(r"^gen-(?:(\d+)-)?(\d+)$")
_DYNAMIC = frozenset({"atlocation", "holds", "holdsany", "inreceptacle", "inreceptacleobject", "opened", "isclean",
                      "ishot", "iscool", "istoggled", "issliced", "ison"})
# Well-formed ALFWorld commands (the grammar's templates); anything else is not a command of this env.
_COMMAND = re.compile(r"^(?:look|inventory|help|go to .+|open .+|close .+|take .+ from .+|move .+ to .+|"
                      r"put .+ (?:in|on|in/on|into) .+|examine .+|use .+|heat .+ with .+|cool .+ with .+|"
                      r"clean .+ with .+|slice .+ with .+)$")
_PUT = re.compile(r"^put (.+?) (?:in/on|in|on|into) (.+)$")
_GAME_META: "OrderedDict[str, tuple[list[str], dict]]" = OrderedDict()


def _game_meta(gamefile: str) -> tuple[list[str], dict]:
    """(walkthrough, pddl_params + task_type) of a game, cached for the last few games."""
    if gamefile in _GAME_META:
        _GAME_META.move_to_end(gamefile)
        return _GAME_META[gamefile]
    try:
        walkthrough = json.loads(Path(gamefile).read_text()).get("walkthrough") or []
    except (OSError, ValueError):
        walkthrough = []
    try:
        traj = json.loads((Path(gamefile).parent / "traj_data.json").read_text())
        params = dict(traj.get("pddl_params") or {})
        params["task_type"] = traj.get("task_type", "")
    except (OSError, ValueError):
        params = {}
    _GAME_META[gamefile] = (list(walkthrough), params)
    while len(_GAME_META) > 256:
        _GAME_META.popitem(last=False)
    return _GAME_META[gamefile]


def _normalize(command: str) -> str:
    cmd = " ".join(command.strip().lower().split())
    return cmd.rstrip(".").strip()


def default_rules(split: str) -> str:
    """The rules a split plays by unless ``rules=`` says otherwise: ``canonical`` on every split. The official
    splits are ALFWorld's own games, and the generated games follow ALFWorld's layout, grammar and goal templates, so
    a score on either is only comparable with ALFWorld numbers if the commands are matched as ALFWorld matches them."""
    if split not in SPLITS:
        raise TaskError(f"unknown ALFWorld split {split!r}; choose from {SPLITS}")
    return "canonical"


def _lenient_command(command: str, admissible: list[str]) -> str:
    """The command the lenient rules read ``command`` as: case, whitespace runs and a final period ignored, the
    older ``put X in/on Y`` read as ``move X to Y`` when that is admissible."""
    cmd = _normalize(command)
    m = _PUT.match(cmd)
    if m and cmd not in admissible:  # the older grammar's wording of the same action
        alias = f"move {m.group(1)} to {m.group(2)}"
        cmd = alias if alias in admissible else cmd
    return cmd


class ALFWorldEnv(AgentEnv):
    """ALFWorld-v0; see the module docstring.

    Args:
        split: ``generated`` (default), ``train``, ``valid_seen`` or ``valid_unseen``.
        data_path: the official ``json_2.1.1`` folder (or its parent, or a split folder) for official splits;
            default ``$ALFWORLD_DATA/json_2.1.1`` and the agentgym data roots. No game there: DataNotFoundError.
        generated_size: number of games the ``generated`` split lists and a seed draws from (ids ``gen-0`` ..
            ``gen-{n-1}``; at most :data:`~.games.GENERATED_LIMIT`, the ids checked free of repeated games). Any id
            below that limit can be played by id or index; none repeats another's game (:meth:`task_identity`).
        react_examples: 0 (default) for the plain Appendix J prompt, or 1..3 ReAct few-shot examples of the
            task's family prepended to the prompt (needs ReAct's prompt files, see :mod:`.prompts`); ``react_style``:
            ``"react"`` or ``"act"``.
        rules: ``"canonical"`` (ALFWorld's exact command match and texts) or ``"lenient"`` (agentgym's friendlier
            reading); default :func:`default_rules` of the split (``canonical`` everywhere). Part of the run's
            identity (:meth:`run_identity`), so results under other rules are never mixed.
        prompt_style: ``"bipace"`` (default: Appendix J), ``"verl-agent"`` or ``"verl-agent-gigpo"`` (verl-agent's
            templates, see the module docstring; not with ``react_examples``). Part of the run's identity.
        max_turns, invalid_action_penalty, history_length, render_mode: see :class:`~agentgym.core.AgentEnv`
            (ALFWorld's usual budget of 50 steps by default).
    """

    #: The async runner calls this env off its event loop (the TextWorld engine takes milliseconds of CPU per step).
    slow_steps = True

    prompt_template = ALFWORLD_TEMPLATE

    def __init__(self, split: str = "generated", *, data_path: str | os.PathLike | None = None,
                 generated_size: int = GENERATED_SIZE, react_examples: int = 0, react_style: str = "react",
                 rules: str | None = None, prompt_style: str = "bipace", max_turns: int = 50,
                 invalid_action_penalty: float = 0.0, history_length: int = 2, render_mode: str | None = None):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if split not in SPLITS:
            raise TaskError(f"unknown ALFWorld split {split!r}; choose from {SPLITS}")
        if not 0 <= int(react_examples) <= 3:
            raise ValueError("react_examples must be 0..3")
        check_rules(rules)
        self.prompt_style = check_prompt_style(prompt_style, "ALFWorld-v0")
        if self.prompt_style != "bipace" and int(react_examples):
            raise ValueError(f"react_examples needs prompt_style='bipace': verl-agent's prompt "
                             f"({prompt_style!r}) has no few-shot examples")
        require_engine()
        self.split = split
        self.rules = rules if rules is not None else default_rules(split)
        self.react_examples = int(react_examples)
        self.react_style = react_style
        if self.react_examples:
            react_examples_text(FAMILIES[0], self.react_examples, style=react_style)  # fail now if files are absent
        self.generated_size = int(generated_size)
        self._games: tuple[GameRecord, ...] = ()
        self._by_id: dict[str, GameRecord] = {}
        if split in OFFICIAL_SPLITS:
            root = official_split_dir(split, data_path)  # fails at once, saying where it looked
            self._games = scan_games(root, split)
            self._by_id = {g.task_id: g for g in self._games}
        elif not 1 <= self.generated_size <= GENERATED_LIMIT:
            raise ValueError(f"generated_size must be 1..{GENERATED_LIMIT} (the range checked free of repeated games), "
                             f"got {self.generated_size}")
        self._engine: Engine | None = None
        self._state: EngineState | None = None
        self._oracle = OracleState(None)
        self._params: dict = {}
        self._dynamic: tuple[str, ...] = ()
        self._task_text = ""
        self._responses: list[str] = []  # this episode's raw responses (verl-agent's prompt shows their projection)

    # ---- tasks --------------------------------------------------------------------------------------------
    # Task data for the contract's selection (agentgym.core). The generated split builds gen-<i> on demand: its
    # default size is ``generated_size`` (what task_ids() lists and a seed draws from); any gen-<i> below
    # GENERATED_LIMIT can be played (no two of them are the same game), a larger i is refused.

    def _split_task_ids(self) -> list[str] | None:
        return None if self.split == "generated" else [g.task_id for g in self._games]

    def _generated_task_id(self, index: int) -> str:
        return f"gen-{index}"

    def _generated_size(self) -> int:
        return self.generated_size

    def _load_task(self, task_id: str) -> GameRecord | None:
        m = _GEN_ID.match(task_id)
        if m:
            seed = int(m.group(1)) if m.group(1) else GENERATED_SEED
            if seed == GENERATED_SEED and int(m.group(2)) >= GENERATED_LIMIT:
                raise TaskError(f"no task {task_id!r} in ALFWorld split 'generated': its ids are gen-0 .. "
                                f"gen-{GENERATED_LIMIT - 1}, the range checked free of repeated games")
            return generated_game(int(m.group(2)), seed=seed)
        if task_id in self._by_id:
            return self._by_id[task_id]
        split = task_id.split("/", 1)[0]
        if split in OFFICIAL_SPLITS and split != self.split:
            return ALFWorldEnv._scan_other(split, task_id)
        if task_id.startswith("file:"):
            return self._record_for_path(task_id[5:])
        return None

    def _task_identity(self, task: GameRecord) -> dict:
        """A generated game: :func:`.generate.game_identity` (family, goal and task text, room, receptacle counts, the
        object types in each receptacle type; not ids, numbering or order). Another game: its PDDL problem (the
        world and goal exactly as the engine plays them), without the problem's name."""
        gamefile = Path(task.gamefile)
        try:
            traj = json.loads((gamefile.parent / "traj_data.json").read_text())
        except (OSError, ValueError) as e:
            raise TaskError(f"cannot read the traj_data.json of {gamefile}: {e}") from None
        if "agentgym" in traj:
            from .generate import game_identity

            return game_identity(traj)
        problem = json.loads(gamefile.read_text()).get("pddl_problem", "")
        return {"pddl_problem": re.sub(r"\(define \(problem [^)]*\)", "", problem, count=1)}

    @staticmethod
    def _scan_other(split: str, task_id: str) -> GameRecord:
        for g in scan_games(official_split_dir(split), split):
            if g.task_id == task_id:
                return g
        raise TaskError(f"no ALFWorld game {task_id!r}")

    def _record_for_path(self, path: str | os.PathLike) -> GameRecord:
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / "game.tw-pddl"
        if not p.is_file():
            raise TaskError(f"ALFWorld game file {p} does not exist")
        family = family_of_folder(p.parent.parent.name)
        if family is None:
            family = _game_meta(str(p))[1].get("task_type", "")
        if family not in FAMILIES:
            raise TaskError(f"cannot tell the task family of {p} (folder name or traj_data.json task_type)")
        return GameRecord(task_id=f"file:{p.resolve()}", gamefile=str(p.resolve()), family=family)

    def _task_id(self, task: GameRecord) -> str:
        return task.task_id

    # ---- episode ------------------------------------------------------------------------------------------
    def _start(self, task: GameRecord) -> str:
        if self._engine is None:
            self._engine = Engine()
        self._engine.load(task.gamefile)
        self._state = self._engine.reset()
        walkthrough, self._params = _game_meta(task.gamefile)
        self._oracle = OracleState(walkthrough)
        self._dynamic = self._dynamic_facts(self._state)
        feedback = self._state.feedback
        self._task_text = feedback.split("Your task is to:", 1)[1].strip() if "Your task is to:" in feedback else ""
        self._responses = []
        return feedback

    @staticmethod
    def _dynamic_facts(state: EngineState) -> tuple[str, ...]:
        return tuple(sorted(" ".join(f) for f in state.facts if f[0] in _DYNAMIC))

    def _execute(self, command: str, parsed: ParsedAction) -> StepOutcome:
        assert self._state is not None and self._engine is not None
        if self.rules == "canonical":
            cmd = command.strip()  # TextWorld's PddlEnv.step strips, then matches exactly
            if cmd in self._state.admissible:
                return self._run(cmd)
            return StepOutcome(NOTHING_HAPPENS, valid=bool(_COMMAND.match(_normalize(cmd))), admissible=False,
                               process_ok=False, invalid_reason=self._why_not_run(cmd))
        cmd = _lenient_command(command, self._state.admissible)
        if cmd not in self._state.admissible:
            if not _COMMAND.match(cmd):
                reason = f"{command.strip()[:80]!r} is not an ALFWorld command"
                return StepOutcome(f"{NOTHING_HAPPENS} (Invalid action: {reason}; choose one of the admissible "
                                   "actions.)", valid=False, admissible=False, process_ok=False,
                                   invalid_reason=reason)
            # The engine's reply to an inadmissible command; its state does not change, so it is not stepped.
            return StepOutcome(NOTHING_HAPPENS, admissible=False, process_ok=False,
                               invalid_reason=f"{cmd!r} is not admissible here")
        return self._run(cmd)

    def _why_not_run(self, cmd: str) -> str:
        """The diagnostic of a command the canonical rules did not run (for ``info``, never the observation)."""
        assert self._state is not None
        if not cmd:
            return "the empty command is not an ALFWorld command (the engine answers 'Nothing happens.')"
        meant = _lenient_command(cmd, self._state.admissible)
        if meant in self._state.admissible:
            return (f"{cmd[:80]!r} is not admissible as typed: ALFWorld matches commands exactly (letter case, "
                    f"single spaces, no final period, 'move X to Y'); did you mean {meant!r}?")
        if not _COMMAND.match(_normalize(cmd)):
            return f"{cmd[:80]!r} is not an ALFWorld command"
        return f"{cmd[:80]!r} is not admissible here"

    def _run(self, cmd: str) -> StepOutcome:
        """Step the engine with an admissible command."""
        assert self._state is not None and self._engine is not None
        before = self._dynamic
        self._state = self._engine.step(cmd)
        self._dynamic = self._dynamic_facts(self._state)
        self._oracle.observe(cmd, self._dynamic != before)
        won_now = self._state.won and not self._won
        self._won = self._won or self._state.won
        return StepOutcome(self._state.feedback, reward=1.0 if won_now else 0.0, terminated=self._state.won,
                           admissible=True, process_ok=True)

    def _invalid_observation(self, problem: str | None) -> str:
        # A response without a parsable <action> tag: the canonical rules play it as the empty command, which is never
        # admissible, so the agent reads the engine's answer; the parse problem goes to info["invalid_reason"].
        if self.rules == "canonical":
            return NOTHING_HAPPENS
        return super()._invalid_observation(problem)

    def step(self, action: str):
        out = super().step(action)
        self._responses.append(action if isinstance(action, str) else repr(action))
        return out

    # ---- contract hooks -----------------------------------------------------------------------------------
    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return None
        return [a for a in self._state.admissible if a != "help"]

    def _anchor_text(self) -> str:
        return self.last_observation + "\n" + "\n".join(self._dynamic)

    def _prompt_fields(self) -> dict[str, Any]:
        adm = self.admissible_actions() or []
        examples = ""
        if self.react_examples and self.task is not None:
            examples = react_examples_text(self.task.family, self.react_examples, style=self.react_style)
        return {"task": self._task_text, "admissible_actions": "\n ".join(f"'{a}'" for a in adm),
                "examples": examples}

    def prompt(self, history_length: int | None = None) -> str:
        if self.prompt_style == "bipace":
            return super().prompt(history_length)
        hl = self.history_length if history_length is None else history_length
        history = [(shown, verl_agent_action(response, 30)) for (shown, _), response in zip(self.history,
                                                                                            self._responses)]
        admissible = self._state.admissible if self._state is not None else []
        return VERL_AGENT_TEMPLATES[self.prompt_style].render(
            history=history, history_length=hl, step=self.turn, current_observation=self.last_observation,
            task_description=self._task_text,
            admissible_actions="\n ".join(f"'{a}'" for a in admissible if a != "help"))

    def run_identity(self) -> dict[str, Any]:
        """``rules`` (``"canonical"|"lenient"``): the command-matching rules this env plays by (resolved default);
        ``prompt_style``: the prompt preset the model reads."""
        return {"rules": self.rules, "prompt_style": self.prompt_style}

    def task_metadata(self) -> dict[str, Any]:
        """``family``: the papers' column name (Pick, Look, Clean, Heat, Cool, Pick2); ``task_type``: ALFWorld's."""
        tt = self.task.family if self.task is not None else ""
        return {"family": FAMILY_SHORT.get(tt, tt), "task_type": tt}

    def _info(self, parsed, raw, outcome) -> StepInfo:
        info = super()._info(parsed, raw, outcome)
        info.update(self.task_metadata())  # type: ignore[typeddict-item]  # extra keys: family, task_type
        return info

    def progress(self) -> float | None:
        if self._won:
            return 1.0
        if self._state is None or not self._params:
            return None
        conds = _goal_conditions(self._state.facts, self.task.family, self._params)
        return sum(conds) / len(conds) if conds else None

    def oracle_action(self) -> str:
        assert self._engine is not None
        cmd = self._oracle.next_command(self._engine.replan, self._state.admissible if self._state else [])
        return f"<action>{cmd}</action>"

    def random_action(self, rng: np.random.Generator) -> str:
        adm = self.admissible_actions() or ["look"]
        return f"<action>{random_admissible(adm, rng)}</action>"


def _goal_conditions(facts, family: str, params: dict) -> list[bool]:
    """ALFRED-style goal conditions of ``family`` evaluated on the engine's facts."""
    obj_t = str(params.get("object_target", "")).lower() + "type"
    rec_t = str(params.get("parent_target", "")).lower() + "type"
    tog_t = str(params.get("toggle_target", "")).lower() + "type"
    otype = {f[1]: f[2] for f in facts if f[0] == "objecttype"}
    rtype = {f[1]: f[2] for f in facts if f[0] == "receptacletype"}
    targets = {o for o, t in otype.items() if t == obj_t}
    in_parent = {f[1] for f in facts if f[0] == "inreceptacle" and f[1] in targets and rtype.get(f[2]) == rec_t}
    if family == "pick_and_place_simple":
        return [bool(in_parent)]
    if family == "pick_two_obj_and_place":
        return [len(in_parent) >= 1, len(in_parent) >= 2]
    if family == "look_at_obj_in_light":
        held = any(f[0] == "holds" and f[2] in targets for f in facts)
        lamp_on = any(f[0] == "istoggled" and otype.get(f[1]) == tog_t for f in facts)
        return [held, lamp_on]
    flag = {"pick_clean_then_place_in_recep": "isclean", "pick_heat_then_place_in_recep": "ishot",
            "pick_cool_then_place_in_recep": "iscool"}.get(family)
    if flag is None:
        return []
    done = {f[1] for f in facts if f[0] == flag and f[1] in targets}
    return [bool(done), bool(done & in_parent)]
