"""ALFWorld prompts: the Appendix J template of the BiPACE paper and optional ReAct few-shot examples.

The template is the paper's ALFWorld prompt: task, the last ``history_length`` observation/action pairs, the current
observation, the admissible actions, and the ``<think>``/``<action>`` instruction. The ReAct option prepends
``k`` few-shot trajectories of the task's family from ReAct's ``alfworld.json`` (Yao et al., staged under
``alfworld/prompts/``). Those transcripts were recorded with the older ALFWorld grammar ("put X in/on Y"); this engine
(alfworld 0.4.2) says "move X to Y", so :func:`react_examples` rewrites those two phrases to the engine's wording.

The ReAct files are data, not shipped with agentgym: ``alfworld/prompts/react_alfworld.json`` (1-2 examples) and
``react_alfworld_3prompts.json`` (3), i.e. ReAct's ``prompts/alfworld.json`` and ``prompts/alfworld_3prompts.json``
(github.com/ysymyth/ReAct), found by :func:`agentgym.data.find_data` (``$AGENTGYM_DATA/alfworld/prompts/`` or the
staged shared data). Without them, asking for examples raises :class:`~agentgym.errors.DataNotFoundError` naming the
places tried and where to get the file; the env checks this when it is built with ``react_examples > 0``.

``prompt_style="verl-agent"`` uses :data:`VERL_AGENT_TEMPLATES` instead: verl-agent's ``ALFWORLD_TEMPLATE_NO_HIS``
(first step: no task line, the observation carries it) and ``ALFWORLD_TEMPLATE``, verbatim (leading and trailing
newline, the space after "tags."), at :data:`~agentgym.prompts.VERL_AGENT_COMMIT`; ``"verl-agent-gigpo"`` is the
same with the older "observaitons" (:data:`~agentgym.prompts.VERL_AGENT_GIGPO_COMMIT`). Copyright Nanyang
Technological University and the verl-agent (GiGPO) team, Apache-2.0.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from ...data import find_data
from ...errors import DataNotFoundError
from ...prompts import PromptTemplate
from .scenes import FAMILIES

__all__ = ["ALFWORLD_TEMPLATE", "VERL_AGENT_TEMPLATES", "react_examples", "react_file_name", "REACT_PREFIX"]

_HEAD = "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task}\n"
_TAIL = ("Your admissible actions of the current situation are: [{admissible_actions}].\n\n"
         "Now it's your turn to take an action.\n"
         "You should first reason step-by-step about the current situation. This reasoning process MUST be "
         "enclosed within <think> </think> tags.\n"
         "Once you've finished your reasoning, you should choose an admissible action for current step and present "
         "it within <action> </action> tags.")
ALFWORLD_TEMPLATE = PromptTemplate(
    first="{examples}" + _HEAD + "Your current observation is: {current_observation}\n" + _TAIL,
    with_history="{examples}" + _HEAD + "Prior to this step, you have already taken {step_count} step(s). Below "
    "are the most recent {history_length} observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n" + _TAIL,
)

# verl-agent's agent_system/environments/prompts/alfworld.py, verbatim (trailing spaces spelled out as "tags. \n").
_VERL_TAIL = ("Your admissible actions of the current situation are: [{admissible_actions}].\n"
              "\n"
              "Now it's your turn to take an action.\n"
              "You should first reason step-by-step about the current situation. This reasoning process MUST be "
              "enclosed within <think> </think> tags. \n"
              "Once you've finished your reasoning, you should choose an admissible action for current step and "
              "present it within <action> </action> tags.\n")
_VERL_NO_HIS = ("\n"
                "You are an expert agent operating in the ALFRED Embodied Environment.\n"
                "Your current observation is: {current_observation}\n" + _VERL_TAIL)


def _verl_with_history(observations: str) -> str:
    return ("\n"
            "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: "
            "{task_description}\n"
            "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
            "{history_length} " + observations + " and the corresponding actions you took: {action_history}\n"
            "You are now at step {current_step} and your current observation is: {current_observation}\n" + _VERL_TAIL)


#: prompt_style -> verl-agent's (ALFWORLD_TEMPLATE_NO_HIS, ALFWORLD_TEMPLATE) at that preset's commit.
VERL_AGENT_TEMPLATES = {
    "verl-agent": PromptTemplate(first=_VERL_NO_HIS, with_history=_verl_with_history("observations")),
    "verl-agent-gigpo": PromptTemplate(first=_VERL_NO_HIS, with_history=_verl_with_history("observaitons")),
}

#: ReAct's prompt-file key prefix of each family.
REACT_PREFIX = {"pick_and_place_simple": "put", "pick_clean_then_place_in_recep": "clean",
                "pick_heat_then_place_in_recep": "heat", "pick_cool_then_place_in_recep": "cool",
                "look_at_obj_in_light": "examine", "pick_two_obj_and_place": "puttwo"}
_PUT_CMD = re.compile(r"^>\s*put (.+?) in/on (.+)$", re.M)
_PUT_FEEDBACK = re.compile(r"You put the (.+?) in/on the (.+?)\.")


#: agentgym's name of each ReAct prompt file -> its path in ReAct's repository.
_REACT_SOURCE = {"react_alfworld.json": "prompts/alfworld.json",
                 "react_alfworld_3prompts.json": "prompts/alfworld_3prompts.json"}


@lru_cache(maxsize=4)
def _react_file(name: str) -> dict:
    try:
        path = find_data(f"alfworld/prompts/{name}")
    except DataNotFoundError as e:
        raise DataNotFoundError(f"ReAct few-shot examples need ReAct's {_REACT_SOURCE[name]} (github.com/ysymyth/"
                                f"ReAct) saved as $AGENTGYM_DATA/alfworld/prompts/{name}; or use react_examples=0. "
                                f"{e}") from None
    return json.loads(path.read_text())


def react_file_name(k: int) -> str:
    """The prompt file that holds ``k`` examples per family."""
    return "react_alfworld.json" if k <= 2 else "react_alfworld_3prompts.json"


def react_examples(family: str, k: int = 2, *, style: str = "react") -> str:
    """``k`` (1..3) ReAct (``style="react"``) or Act-only (``"act"``) examples of ``family``, engine wording."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}")
    if style not in ("react", "act"):
        raise ValueError("style must be 'react' or 'act'")
    if not 1 <= k <= 3:
        raise ValueError("k must be 1, 2 or 3")
    data = _react_file(react_file_name(k))
    parts = []
    for i in range(k):
        text = data[f"{style}_{REACT_PREFIX[family]}_{i}"]
        text = _PUT_CMD.sub(r"> move \1 to \2", text)  # commands only; 'think:' lines keep their words
        text = _PUT_FEEDBACK.sub(r"You move the \1 to the \2.", text)
        parts.append(text.strip())
    return ("Here are examples of solving similar tasks ('>' marks an action; 'think:' lines are reasoning):\n\n"
            + "\n\n".join(parts) + "\n\n(End of examples.)\n\n")
