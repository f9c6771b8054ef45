"""``prompt_style="verl-agent"``: every prompt byte-equal to the one verl-agent's environment managers build.

The reference is verl-agent's own code, run from ``shared/reference`` (:mod:`upstream` loads it; nothing of it is
copied here): its prompt modules at ``796ed310`` and, for ``verl-agent-gigpo``, the ALFWorld module at ``7b68c51``;
its ``AlfWorldEnvironmentManager``, ``WebshopEnvironmentManager`` and ``SearchEnvironmentManager``
(``env_manager.py``) with their memories (``memory/memory.py``) and action projections (``env_package/*/
projection.py``). Each real episode (ALFWorld, WebShop, WikiSearch) mixes well-formed responses with upper-case
ones and responses without a tag, and every step's prompt is compared with the one verl-agent's manager builds from
what it sees: the env's raw observations, its admissible lists and the raw responses, passed through verl-agent's
vectorised-env interface (:class:`OneEnv`). The reference files are checked by git blob id first.
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import partial

import pytest

import agentgym
import upstream
from agentgym.prompts import PROMPT_STYLES, verl_agent_action
from upstream import VERL_AGENT_GIGPO as GIGPO
from upstream import VERL_AGENT_HEAD as HEAD

COMMIT_OF_STYLE = {"verl-agent": HEAD, "verl-agent-gigpo": GIGPO}
#: reference file -> its git blob id in langfengQ/verl-agent (shared/reference/README.md gives the commits).
BLOBS = {
    f"{HEAD}/agent_system/environments/prompts/alfworld.py": "6f7244534d1988b3f22988e1f14282cf59d6cd24",
    f"{HEAD}/agent_system/environments/prompts/webshop.py": "8677ba0393c46406fab80e56da1d2832b72b7498",
    f"{HEAD}/agent_system/environments/prompts/search.py": "4f0b4ff471b6440be36b814617df60df3ac379dc",
    f"{GIGPO}/agent_system/environments/prompts/alfworld.py": "f754f27f2f24fad233f496b25dab2ed21dd6bef5",
    f"{HEAD}/agent_system/environments/env_manager.py": "ab09dffc5fa880781f6fb3d7345ee83fe7dd09a2",
    f"{HEAD}/agent_system/memory/memory.py": "06de8cc82f2f44d6d30d7c2d66a0f9db5dda1676",
    f"{HEAD}/agent_system/environments/env_package/alfworld/projection.py":
        "fbf2f792823f352a96af14c1c62d574323a73319",
    f"{HEAD}/agent_system/environments/env_package/webshop/projection.py":
        "63a84176639c632427684f8689d23e5ee565798f",
    f"{HEAD}/agent_system/environments/env_package/search/projection.py":
        "3ce7039d96f0517809371a93918be656de387713",
}


@pytest.fixture(scope="module")
def verl_agent():
    """verl-agent's code with the prompts of each commit: {commit: upstream.VerlAgent}."""
    return {commit: upstream.load_verl_agent(commit) for commit in (HEAD, GIGPO)}


@pytest.mark.parametrize("name, blob", sorted(BLOBS.items()))
def test_the_reference_files_are_verl_agents_own(name, blob):
    path = upstream.require(f"verl-agent/{name}") / "verl-agent" / name
    assert upstream.git_blob_id(path) == blob, f"{path} is not upstream's file"


def test_the_two_alfworld_commits_differ_by_the_typo_only(verl_agent):
    head, old = verl_agent[HEAD].prompts, verl_agent[GIGPO].prompts
    assert "observaitons" in old.ALFWORLD_TEMPLATE and "observaitons" not in head.ALFWORLD_TEMPLATE
    assert old.ALFWORLD_TEMPLATE.replace("observaitons", "observations") == head.ALFWORLD_TEMPLATE
    assert old.ALFWORLD_TEMPLATE_NO_HIS == head.ALFWORLD_TEMPLATE_NO_HIS
    assert old.WEBSHOP_TEMPLATE == head.WEBSHOP_TEMPLATE and old.SEARCH_TEMPLATE == head.SEARCH_TEMPLATE


# ---- verl-agent's vectorised-env interface over one agentgym episode ------------------------------------------
class OneEnv:
    """What verl-agent's managers call on their vectorised envs (``reset``, ``step``, ALFWorld's
    ``get_admissible_commands``), for one agentgym env. ``step`` is handed the manager's projected actions; it steps
    the agentgym env with the raw response the test set in ``response`` (as a policy would send it) and records the
    projected action, so the test can check that the env played what verl-agent's projection made of it.

    ``kind`` says which env's return shapes to give: ``alfworld`` (text, image, [rewards,] dones, infos), ``webshop``
    (the raw page text; ``available_actions`` in each info), ``search`` (the question, then the search tool's
    observation of the projected action: ``tool``)."""

    def __init__(self, env, kind: str, options: dict, tool=None):
        self.env, self.kind, self.options, self.tool = env, kind, options, tool
        self.response: str | None = None
        self.projected: list[str] = []
        self.done = False
        self.get_admissible_commands: list[list[str]] = []

    def reset(self, kwargs=None):
        obs, info = self.env.reset(options=self.options)
        if self.kind == "alfworld":
            self.get_admissible_commands = [list(self.env._state.admissible)]
            return [obs], None, [{}]
        if self.kind == "webshop":
            return [obs], [{"available_actions": info["available_actions"]}]
        return [self.env.task.question], [{}]

    def step(self, actions):
        self.projected.append(actions[0])
        obs, reward, term, trunc, info = self.env.step(self.response)
        self.done = term or trunc
        infos = [{"won": info["won"]}]
        if self.kind == "alfworld":
            self.get_admissible_commands = [list(self.env._state.admissible)]
            return [obs], None, [reward], [self.done], infos
        if self.kind == "webshop":
            infos[0]["available_actions"] = info["available_actions"]
            return [obs], [reward], [self.done], infos
        return [self.tool(actions[0])], [reward], [self.done], infos


# ---- the search tool's observation (not in shared/reference) ---------------------------------------------------
def search_observation(contents: list[str]) -> str:
    """The observation verl-agent's search env gives for one search whose result list has these documents'
    ``contents``, as its search tool formats it (``env_package/search``, not staged in shared/reference, so stated
    here): each document as ``Doc <i>: <contents stripped>`` plus a newline, concatenated; the text as
    ``json.dumps({"result": text})``; wrapped in ``<information>`` tags between newlines; and stripped."""
    listing = "".join(f"Doc {i + 1}: {c.strip()}\n" for i, c in enumerate(contents))
    return ("\n<information>" + json.dumps({"result": listing}) + "</information>\n").strip()


# ---- checks without an engine or data -----------------------------------------------------------------------
@pytest.mark.parametrize("response", [
    "<think>go</think><action>go to cabinet 1</action>", "<action>  Go To Cabinet 1 </action>",
    "no tags at all, just some text that is rather long", "<ACTION>open drawer 1</ACTION>", "</action><action>x",
    "<action>a</action><action>b</action>", "短い", ""])
def test_the_projection_is_verl_agents(verl_agent, response):
    va = verl_agent[HEAD]
    assert verl_agent_action(response, 30) == va.alfworld_projection([response], [[]])[0][0]
    assert verl_agent_action(response, 20) == va.webshop_projection([response])[0][0]


@pytest.mark.parametrize("response", [
    "<think>x</think><search> capital of Tanzania </search>", "<SEARCH>q</SEARCH>", "<answer>Dodoma</answer>",
    "<answer>a</answer><search>q</search>", "<search>q</search><answer>a</answer>", "<search>a</search>b</search>",
    "nothing", "<search></search>", "<Answer> x </Answer></answer>"])
def test_the_search_projection_is_verl_agents(verl_agent, response):
    from agentgym.envs.wiki_search.env import verl_agent_search_action

    assert verl_agent_search_action(response) == verl_agent[HEAD].search_projection([response])[0][0]


@pytest.mark.parametrize("contents", [[], ['"Pisa"\nPisa is a city in Tuscany.'],
                                      ['"Galileo Galilei"\nGalileo di Vincenzo Bonaiuti de\' Galilei, né à Pise ',
                                       '"Ørsted"\n\tHans Christian Ørsted — “physicist” \\ {x}\n']])
def test_the_search_information_is_verl_agents(contents):
    from agentgym.envs.wiki_search.env import verl_agent_information

    assert verl_agent_information(contents) == search_observation(contents)


@pytest.mark.parametrize("env_id", ["ALFWorld-v0", "WebShop-v0", "WikiSearch-v0"])
def test_an_unknown_style_is_refused_with_the_valid_ones(env_id):
    with pytest.raises(ValueError, match="valid: bipace, verl-agent, verl-agent-gigpo"):
        agentgym.make(env_id, prompt_style="verl_agent")


# ---- real episodes, every step --------------------------------------------------------------------------------
def responses_for(env, step: int) -> str:
    """The episode's scripted responses: the oracle's command with reasoning, except an upper-case command at step
    1 and a response without tags at step 2."""
    if step == 1:
        return "<think>try it in capitals</think><action>" + _body(env.oracle_action()).upper() + "</action>"
    if step == 2:
        return "I am not sure what to do here, so I will describe the room and wait for it"
    return f"<think>step {step}: follow the plan</think>" + env.oracle_action()


def _body(response: str) -> str:
    return re.search(r"<action>(.*?)</action>", response, re.DOTALL).group(1)


def play_in_lockstep(env, envs: OneEnv, manager, responses, tail: int | None) -> int:
    """Reset both, then feed each response to verl-agent's manager (which steps the env through ``envs``); every
    prompt of a running episode must equal the manager's. Returns the number of steps played."""
    out, _ = manager.reset({})
    if envs.kind == "alfworld":
        assert "help" in envs.get_admissible_commands[0]  # the engine lists it; verl-agent's prompt drops it
    assert env.prompt() == out["text"][0], "reset"
    steps = 0
    for step, response in enumerate(responses):
        envs.response = response
        out, _, _, _ = manager.step([response])
        steps += 1
        if tail is not None:  # what verl-agent's projection made of the response is what the prompt's history shows
            assert envs.projected[-1] == verl_agent_action(response, tail), f"step {step + 1}"
        if envs.done:
            break
        assert env.prompt() == out["text"][0], f"step {step + 1}"
    return steps


@pytest.mark.parametrize("style, history_length", [("verl-agent", 2), ("verl-agent-gigpo", 2), ("verl-agent", 3),
                                                   ("verl-agent", 0)])
def test_alfworld_every_step(verl_agent, style, history_length):
    for mod in ("alfworld", "textworld", "fast_downward"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"the ALFWorld engine needs {mod}: pip install -e '.[alfworld]'")
    va = verl_agent[COMMIT_OF_STYLE[style]]
    env = agentgym.make("ALFWorld-v0", prompt_style=style, history_length=history_length)
    envs = OneEnv(env, "alfworld", {"task_id": "gen-4"})
    manager = va.env_manager.AlfWorldEnvironmentManager(envs, partial(va.alfworld_projection),
                                                        upstream.verl_agent_config(history_length))

    class Responses:  # generated as the episode goes: the oracle's next command depends on the state
        def __iter__(self):
            for step in range(12):
                yield responses_for(env, step)

    assert play_in_lockstep(env, envs, manager, Responses(), 30) >= 4


@pytest.mark.parametrize("style, history_length", [("verl-agent", 2), ("verl-agent-gigpo", 4)])
def test_webshop_every_step(verl_agent, shared_data, style, history_length):
    if not (shared_data / "webshop" / "documents_1k.jsonl").exists():
        pytest.skip("WebShop's catalogue (webshop/documents_1k.jsonl) is not in the shared data")
    va = verl_agent[COMMIT_OF_STYLE[style]]
    env = agentgym.make("WebShop-v0", prompt_style=style, history_length=history_length)
    assert env.observation_mode == "text"  # WebShop's raw text: what verl-agent's manager formats itself
    envs = OneEnv(env, "webshop", {"task_id": "ws0-3"})
    manager = va.env_manager.WebshopEnvironmentManager(envs, partial(va.webshop_projection),
                                                       upstream.verl_agent_config(history_length))

    class Responses:
        def __iter__(self):
            for step in range(12):
                yield responses_for(env, step)

    assert play_in_lockstep(env, envs, manager, Responses(), 20) >= 4


def test_wiki_search_every_step(verl_agent):
    if importlib.util.find_spec("bm25s") is None:
        pytest.skip("pip install -e '.[retrieval]' (missing bm25s)")
    va = verl_agent[HEAD]
    history_length = 2
    env = agentgym.make("WikiSearch-v0", prompt_style="verl-agent", history_length=history_length, max_turns=8)

    def tool(action: str) -> str:
        """The search env's observation of a projected action: none for an answer or no search, else the tool's
        text of the retriever's hits."""
        m = re.fullmatch(r"<search>(.*)</search>", action, re.DOTALL)
        if m is None:
            return ""
        hits = env.retriever.search([m.group(1).strip()], env.topk)[0]
        return search_observation([hit.passage.contents for hit in hits])

    envs = OneEnv(env, "search", {"task_index": 0}, tool=tool)
    manager = va.env_manager.SearchEnvironmentManager(envs, partial(va.search_projection),
                                                      upstream.verl_agent_config(history_length))
    responses = ["<think>first look it up</think><search> {q} </search>",
                 "<think>again</think><SEARCH>Galileo Galilei birthplace</SEARCH> trailing words",
                 "I do not know yet",
                 "<think>one more</think><search>Pisa</search><answer>Pisa</answer>",
                 "<think>more</think><search>Galilean moons</search>"]
    out, _ = manager.reset({})
    assert env.prompt() == out["text"][0]
    for step, response in enumerate(responses):
        envs.response = response.format(q=env.task.question)
        out, _, _, _ = manager.step([envs.response])
        assert env.prompt() == out["text"][0], f"step {step + 1}"
    assert '<information>{"result": "Doc 1: ' in env.prompt()
    envs.response = "<think>done</think><answer>Pisa</answer>"
    manager.step([envs.response])
    assert envs.done


# ---- the preset is part of a run's identity --------------------------------------------------------------------
def test_the_style_is_in_the_run_identity_and_resume_refuses_another(tmp_path):
    if importlib.util.find_spec("bm25s") is None:
        pytest.skip("pip install -e '.[retrieval]' (missing bm25s)")
    from agentgym.eval.results import ResultsFile, ResultsMismatchError, run_identity

    assert PROMPT_STYLES[0] == "bipace"
    default = agentgym.make("WikiSearch-v0").run_identity()
    verl = agentgym.make("WikiSearch-v0", prompt_style="verl-agent").run_identity()
    assert default == {"prompt_style": "bipace"} and verl == {"prompt_style": "verl-agent"}
    results = ResultsFile(tmp_path / "r.jsonl")
    mine = run_identity("oracle", None, 6, {}, default)
    results.append([{"env_id": "WikiSearch-v0", "split": "demo", "task_id": "t", "seed": 0, "trial": 0, "won": True,
                     "score": 1.0, "turns": 2, "error": None, **mine}])
    results.check_identity("WikiSearch-v0", "demo", mine)  # the same preset resumes
    with pytest.raises(ResultsMismatchError, match="prompt_style"):
        results.check_identity("WikiSearch-v0", "demo", run_identity("oracle", None, 6, {}, verl))
