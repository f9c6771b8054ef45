"""The fast paths of ALFWorld-v0's engine (``agentgym.envs.alfworld.fastpddl``) against TextWorld's stock code.

In one process: the plain reader of grammar documents against TatSu's parse (alfworld's grammar, the older grammar
of the staged fixture game, a document with comments and odd spacing), and ``FastPddlEnv`` against the stock
``PddlEnv`` (both wrapped as alfworld wraps them) stepping in lockstep, resets, the planner's plan (made lazily)
and every admissible list included. The output digest and the lockstep test against ``AlfredTWEnv`` check the same
end to end.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("textworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("fast_downward", reason="pip install -e '.[alfworld]'")

from textworld.envs.pddl import logic as pddl_logic  # noqa: E402

from agentgym.envs.alfworld import fastpddl  # noqa: E402
from agentgym.envs.alfworld.games import generated_game  # noqa: E402
from agentgym.envs.alfworld.generate import game_logic as alfworld_files  # noqa: E402


def _dump(logic) -> tuple:
    actions = {k: (a.name, a.template, a.feedback_rule, a.pddl, a.grammar) for k, a in logic.actions.items()}
    rules = {k: [(r.lhs, repr(r.rhs), r.weight, r.condition) for r in v] for k, v in logic.grammar._rules.items()}
    return actions, rules, logic.domain, sorted(t.name for t in logic.types)


def _documents(shared_data_or_none) -> list[tuple[str, str]]:
    files = alfworld_files()
    docs = [("alfred.twl2 with a task", files["grammar"].replace("UNKNOWN GOAL", "put a clean mug in cabinet"))]
    docs.append(("alfred.twl2 with comments and odd spacing", "# a comment\n" + files["grammar"].replace(
        "action GotoLocation {", "action   GotoLocation\n{  # trailing comment\n").replace(
        'feedback :: "#CloseObject.feedback#";', 'feedback::"#CloseObject.feedback#" ;')))
    if shared_data_or_none is not None:
        fixture = shared_data_or_none / "alfworld" / "fixtures" / "multiagent_debug_example" / "game.tw-pddl"
        if fixture.is_file():
            docs.append(("the older grammar of the staged fixture game", json.loads(fixture.read_text())["grammar"]))
    return [(name, doc) for name, doc in docs]


def test_plain_grammar_reader_builds_what_tatsu_builds(shared_data_or_none):
    domain = alfworld_files()["pddl_domain"]
    docs = _documents(shared_data_or_none)
    for name, doc in docs:
        stock = pddl_logic.GameLogic(domain=domain, grammar=doc)
        plain = fastpddl._plain_game_logic(domain, doc)
        assert _dump(plain) == _dump(stock), name
    assert "action   GotoLocation\n{  # trailing comment" in docs[1][1]  # the edit took


@pytest.mark.parametrize("doc", [
    'action A { template :: "a"; template :: "b"; feedback :: "#f#"; }',  # a repeated field
    'action A { feedback :: "#f#"; }',  # no template
    'actionA { template :: "a"; feedback :: "#f#"; }',  # a keyword run into a name
    'grammar :: """{}"""; trailing',
])
def test_documents_the_plain_reader_does_not_take_go_to_tatsu(doc):
    with pytest.raises(fastpddl._NotPlain):
        fastpddl._read_document(doc)


def _wrapped(env_class):
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
    pddl = env_class(infos)
    return pddl, AlfredInfos(AlfredDemangler(pddl, shuffle=False))


def _view(gs) -> tuple:
    return (gs["feedback"], gs["admissible_commands"], gs["_valid_commands"], gs["won"], gs["command_templates"],
            sorted(map(str, gs["_facts"])), gs.get("score"), gs.get("done"))


def test_fast_env_steps_like_the_stock_env_resets_and_planner_included():
    from textworld.envs import PddlEnv

    stock_pddl, stock = _wrapped(PddlEnv)
    fast_pddl, fast = _wrapped(fastpddl.FastPddlEnv)
    rng = np.random.default_rng(7)
    for index in (0, 6, 1):  # two pick-and-place games, then a look game: loads switch games
        game = generated_game(index).gamefile
        walkthrough = json.loads(Path(game).read_text())["walkthrough"]
        stock.load(game)
        fast.load(game)
        for episode in range(2):  # the second reset restores the loaded state
            assert _view(fast.reset()) == _view(stock.reset())
            for t in range(25):
                gs = stock.state
                if episode == 0 and t < len(walkthrough):
                    cmd = walkthrough[t]
                else:
                    adm = gs["admissible_commands"]
                    cmd = adm[int(rng.integers(len(adm)))] if rng.random() < 0.7 else "go to cabinet 37"
                a, b = fast.step(cmd), stock.step(cmd)
                assert _view(a[0]) == _view(b[0]) and a[1:] == b[1:], (game, episode, t, cmd)
                if b[2]:
                    break
            if index == 0 and episode == 1:  # the planner (its translation made on this first use) agrees
                assert fast_pddl._pddl_state.replan(fast_pddl._entity_infos) == \
                    stock_pddl._pddl_state.replan(stock_pddl._entity_infos)
