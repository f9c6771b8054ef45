"""TauAirline-v0: contract checks, gold replay on all 50 tasks, reward sensitivity, malformed calls, isolation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.core import INFO_TYPES
from agentgym.envs.tau_airline import ENTRY

_ok, _why = ENTRY.split_available("base")
pytestmark = pytest.mark.skipif(not _ok, reason=f"τ² airline data not available: {_why}")

if _ok:
    from agentgym.envs.tau_airline.db import EpisodeDB
    from agentgym.envs.tau_airline.metrics import pass_hat_k, tau_summary
    from agentgym.envs.tau_airline.oracle import TRANSFER_MESSAGE, closing_message, tool_call_text
    from agentgym.envs.tau_airline.tasks import WRITE_TOOLS
    from agentgym.envs.tau_airline.tools import call_tool

STOP = "<response>###STOP###</response>"


def make(split="base", **kw):
    return agentgym.make("TauAirline-v0", split=split, **kw)


def play(env, responses):
    """Step through ``responses`` until the episode ends; return (last reward, last info, steps)."""
    r, info, n = 0.0, None, 0
    for resp in responses:
        _, r, term, trunc, info = env.step(resp)
        n += 1
        if term or trunc:
            return r, info, n
    raise AssertionError("the episode did not end")


def gold_responses(task, actions=None):
    actions = task.gold_actions if actions is None else actions
    out = [tool_call_text(a.name, a.arguments) for a in actions]
    msg = closing_message(task.communicate_info, any(a.name == "transfer_to_human_agents" for a in actions))
    if msg:
        out.append(f"<response>{msg}</response>")
    return out + [STOP]


def check_info(info):
    for key, types in INFO_TYPES.items():
        assert isinstance(info[key], types), key
    json.dumps({k: info[k] for k in ("category", "speaker", "tool_name", "reward_info")})


def test_check_env_and_registration():
    env = agentgym.make("TauAirline-v0")
    assert env.split == "test" and len(env.task_ids()) == 20
    check_env(env, skip_render_check=True)


def test_reset_draws_with_own_rng_and_selects_by_id():
    env = make()
    a = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    b = [make().reset(seed=s)[1]["task_id"] for s in range(8)]
    assert a == b and len(set(a)) > 1
    obs, info = env.reset(options={"task_id": "14"})
    assert info["task_id"] == "14" and "mohamed_silva_9265" in obs and obs.startswith("User: ")
    assert info["category"] == "state_change"
    assert env.get_task("14").task_id == "14"
    with pytest.raises(agentgym.errors.TaskError):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(agentgym.errors.TaskError):
        env.reset(options={"bogus": 1})


def test_oracle_wins_every_task():
    env = make()
    wins, per_cat = 0, {}
    for tid in env.task_ids():
        env.reset(seed=0, options={"task_id": tid})
        done, steps = False, 0
        while not done:
            _, r, term, trunc, info = env.step(env.oracle_action())
            check_info(info)
            assert info["action_valid"] and info["process_ok"] is not False, (tid, info["invalid_reason"])
            done, steps = term or trunc, steps + 1
        ri = info["reward_info"]
        assert term and not trunc and r == 1.0 and info["won"] and info["score"] == 1.0, (tid, ri)
        assert ri["db_match"] and ri["communicate_reward"] == 1.0 and ri["action_reward"] == 1.0
        assert ri["termination_reason"] in ("agent_stop", "user_transfer")
        assert info["progress"] == 1.0
        wins += 1
        per_cat[info["category"]] = per_cat.get(info["category"], 0) + 1
    assert wins == 50 and per_cat == {"state_change": 26, "info_only": 1, "no_action": 22, "transfer": 1}


def _db_changing_writes(domain, task):
    """Indices of the gold write actions that change the DB when the gold is replayed."""
    db, out = EpisodeDB(domain.db), []
    for i, a in enumerate(task.gold_actions):
        before = db.digest()
        call_tool(db, a.name, a.arguments)
        if a.name in WRITE_TOOLS and db.digest() != before:
            out.append(i)
    return out


def _alter(action_name, args, domain):
    args = json.loads(json.dumps(args))
    if action_name == "cancel_reservation":
        others = sorted(k for k in domain.db["reservations"] if k != args["reservation_id"])
        args["reservation_id"] = others[0]
    elif action_name == "book_reservation":
        args["passengers"][0]["first_name"] += "x"
    elif action_name == "update_reservation_passengers":
        args["passengers"][0]["dob"] = "1999-12-31"
    elif action_name == "update_reservation_baggages":
        args["total_baggages"] += 1
    elif action_name == "update_reservation_flights":
        args["flights"] = args["flights"][:-1]  # drop the last leg
    elif action_name == "send_certificate":
        args["amount"] += 1
    else:
        raise AssertionError(action_name)
    return args


def test_dropping_or_altering_a_state_changing_gold_action_scores_zero():
    env = make()
    domain = env.domain
    n = 0
    for task in domain.tasks.values():
        for i in _db_changing_writes(domain, task):
            g = task.gold_actions
            dropped = g[:i] + g[i + 1:]
            env.reset(options={"task_id": task.task_id})
            r, info, _ = play(env, gold_responses(task, dropped))
            assert r == 0.0 and not info["reward_info"]["db_match"] and not info["won"], (task.task_id, i)
            altered = list(g)
            altered[i] = type(g[i])(g[i].action_id, g[i].name, _alter(g[i].name, g[i].arguments, domain))
            env.reset(options={"task_id": task.task_id})
            r, info, _ = play(env, gold_responses(task, altered))
            assert r == 0.0 and not info["reward_info"]["db_match"], (task.task_id, i)
            n += 1
    assert n >= 30  # every state-changing task contributes


def test_missing_communicated_information_scores_zero():
    env = make()
    for task in env.domain.tasks.values():
        if not task.communicate_info:
            continue
        env.reset(options={"task_id": task.task_id})
        r, info, _ = play(env, [tool_call_text(a.name, a.arguments) for a in task.gold_actions] + [STOP])
        ri = info["reward_info"]
        assert r == 0.0 and ri["db_match"] and ri["communicate_reward"] == 0.0
        assert not any(c["met"] for c in ri["communicate_checks"])


def test_doing_nothing_wins_exactly_the_tasks_whose_gold_changes_and_says_nothing():
    # τ²'s reward looks only at the final DB and the communicated strings: an agent that stops at once wins the
    # tasks whose gold leaves the DB as it was and communicates nothing (refusals, the transfer), and only those.
    env = make()
    wins = 0
    for task in env.domain.tasks.values():
        env.reset(options={"task_id": task.task_id})
        r, info, n = play(env, [STOP])
        assert n == 1 and info["reward_info"]["termination_reason"] == "agent_stop"
        trivial = not _db_changing_writes(env.domain, task) and not task.communicate_info
        assert (r == 1.0) == trivial, task.task_id
        wins += r == 1.0
    assert 7 <= wins < 26


@pytest.mark.parametrize("response,fragment", [
    ("<tool_call>{not json</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "fly_me_to_the_moon", "arguments": {}}</tool_call>',
     "Error: Tool 'fly_me_to_the_moon' not found."),
    ('<tool_call>{"name": "get_reservation_details", "arguments": {}}</tool_call>',
     "Error: AirlineTools.get_reservation_details() missing 1 required positional argument: 'reservation_id'"),
    ('<tool_call>{"name": "get_reservation_details", "arguments": {"reservation_id": 7}}</tool_call>',
     "reservation_id must be a string, got integer"),
    ('<tool_call>{"name": "get_reservation_details", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', "must be a JSON object"),
    ('<tool_call>["get_user_details"]</tool_call>', "must be a JSON object"),
    ("<tool_call>" + "[" * 100_000 + "</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": ["x"], "arguments": {}}</tool_call>', "must be a string"),
    ('<tool_call>{"tool_calls": []}</tool_call>', "empty tool_calls"),
    ('<tool_call>{"type": "function", "function": {"name": "get_user_details", "arguments": "{oops"}}</tool_call>',
     "not valid JSON"),
])
def test_malformed_tool_calls_are_tool_errors_and_the_episode_goes_on(response, fragment):
    env = make()
    env.reset(options={"task_id": "14"})
    task = env.task
    obs, r, term, trunc, info = env.step(response)
    check_info(info)
    assert fragment in obs and fragment in info["invalid_reason"]
    assert info["action_valid"] is False and info["process_ok"] is False and r == 0.0 and not (term or trunc)
    assert info["speaker"] == "tool"
    r, info, _ = play(env, gold_responses(task))  # nothing was changed: the gold still wins
    assert r == 1.0


def test_domain_refusal_is_valid_but_not_ok_and_untagged_text_is_invalid():
    env = make()
    env.reset(options={"task_id": "0"})
    obs, _, term, _, info = env.step(tool_call_text("get_reservation_details", {"reservation_id": "NOPE00"}))
    assert info["action_valid"] and info["process_ok"] is False and "not found" in obs and not term
    obs, _, term, _, info = env.step("Sure, let me cancel that for you.")
    assert not info["action_valid"] and info["speaker"] is None and not term


def test_openai_style_actions():
    env = make()
    env.reset(options={"task_id": "14"})
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_user_details", "arguments": json.dumps({"user_id": "mohamed_silva_9265"})}}]}
    obs, _, _, _, info = env.step(call)
    assert info["action_valid"] and info["process_ok"] and info["tool_name"] == "get_user_details"
    assert json.loads(obs.split(": ", 1)[1])["user_id"] == "mohamed_silva_9265"
    inner = {"type": "function", "function": {"name": "get_user_details",
                                              "arguments": json.dumps({"user_id": "mohamed_silva_9265"})}}
    obs2, *_ = env.step(f"<think>look up</think><tool_call>{json.dumps(inner)}</tool_call>")
    assert obs2 == obs
    obs, _, _, _, info = env.step({"role": "assistant", "content": "What else can I do?"})
    assert info["speaker"] == "user" and obs.startswith("User: ")


def test_parallel_episodes_do_not_share_bookings():
    a, b = make(), make()
    task = next(t for t in a.domain.tasks.values() if any(g.name == "book_reservation" for g in t.gold_actions))
    a.reset(options={"task_id": task.task_id})
    b.reset(options={"task_id": task.task_id})
    ra = gold_responses(task)
    rb = gold_responses(task)
    # Interleave: a books first; b must not see a's reservation, then b books its own with the same new id.
    k = next(i for i, g in enumerate(task.gold_actions) if g.name == "book_reservation")
    for resp in ra[:k + 1]:
        a.step(resp)
    assert ("reservations", "HATHAT") in a.db
    obs, *_ = b.step(tool_call_text("get_reservation_details", {"reservation_id": "HATHAT"}))
    assert "not found" in obs
    user_id = task.gold_actions[k].arguments["user_id"]
    obs, *_ = b.step(tool_call_text("get_user_details", {"user_id": user_id}))
    assert "HATHAT" not in json.loads(obs.split(": ", 1)[1])["reservations"]
    r_b, _, _ = play(b, rb)
    r_a, _, _ = play(a, ra[k + 1:])
    assert r_a == 1.0 and r_b == 1.0
    assert "HATHAT" not in a.domain.db["reservations"]  # the shared base DB is untouched
    # A fresh episode of the same env starts from the initial DB again.
    a.reset(options={"task_id": task.task_id})
    assert ("reservations", "HATHAT") not in a.db


def test_truncation_scores_zero_and_reports_components():
    env = make(max_turns=3)
    env.reset(options={"task_id": "0"})
    rng = np.random.default_rng(0)
    infos = []
    for _ in range(3):
        _, r, term, trunc, info = env.step(tool_call_text("list_all_airports", {}))
        infos.append(info)
    assert trunc and not term and r == 0.0
    ri = infos[-1]["reward_info"]
    assert ri["termination_reason"] == "max_turns" and ri["reward"] == 0.0 and ri["db_match"]
    assert not infos[-1]["won"] and infos[-1]["score"] == 0.0
    assert isinstance(env.random_action(rng), str)


def test_transfer_task_ends_with_the_user_transfer():
    env = make()
    task = next(t for t in env.domain.tasks.values() if t.category == "transfer")
    env.reset(options={"task_id": task.task_id})
    r, info, _ = play(env, gold_responses(task))
    assert r == 1.0 and info["reward_info"]["termination_reason"] == "user_transfer"
    assert TRANSFER_MESSAGE in env.agent_messages[-1]


def test_scripted_user_reveals_instructions_in_order_then_stops():
    env = make()
    obs, _ = env.reset(options={"task_id": "14"})
    sc = env.task.scenario
    assert sc.reason_for_call.strip() in obs and "mohamed_silva_9265" in obs
    chunks = [p.strip() for p in sc.task_instructions.split("\n\n") if p.strip()]
    seen = []
    for _ in range(len(chunks)):
        obs, r, term, _, _ = env.step("<response>Anything else?</response>")
        assert not term
        seen.append(obs[len("User: "):])
    assert seen == chunks
    obs, r, term, _, info = env.step("<response>Anything else?</response>")
    assert term and "###STOP###" in obs and info["reward_info"]["termination_reason"] == "user_stop"
    assert r == 0.0  # the reservation was never changed


def test_random_policy_is_reproducible_and_mostly_loses():
    def run(seed):
        env = make()
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        trace = []
        for _ in range(12):
            obs, r, term, trunc, info = env.step(env.random_action(rng))
            trace.append((obs, r))
            if term or trunc:
                break
        return trace

    assert run(3) == run(3)
    # Played to the end on all 50 tasks, it wins only where leaving the DB alone is right (measured: 15 wins, all
    # no_action or transfer; mean reward 0.30), never a state change or an answer.
    env = make()
    won = []
    for i, tid in enumerate(env.task_ids()):
        rng = np.random.default_rng(i)
        env.reset(seed=i, options={"task_id": tid})
        while True:
            _, r, term, trunc, info = env.step(env.random_action(rng))
            if term or trunc:
                break
        if info["won"]:
            won.append(info["category"])
    assert 0 < len(won) <= 0.35 * len(env.task_ids())
    assert set(won) <= {"no_action", "transfer"}


def test_too_many_tool_errors_end_the_episode():
    """τ²'s orchestrator stops a run at max_errors (10) failed tool calls and scores it 0; so does the env."""
    env = make()
    env.reset(options={"task_id": "0"})  # a no_action task: doing nothing would score 1
    bad = [tool_call_text("get_reservation_details", {"reservation_id": "NOPE00"}),  # refused by the domain
           "<tool_call>{broken</tool_call>",  # not JSON
           tool_call_text("fly_me_home", {})]  # unknown tool
    for k in range(1, 10):
        _, r, term, trunc, info = env.step(bad[k % 3])
        assert not term and info["process_ok"] is False and env.num_errors == k
    _, r, term, trunc, info = env.step(bad[1])
    assert term and not trunc and r == 0.0 and not info["won"]
    assert info["reward_info"]["termination_reason"] == "too_many_errors" and info["reward_info"]["db_match"]
    # Successful calls do not count; max_errors is configurable and None turns the limit off.
    env = make(max_errors=2)
    env.reset(options={"task_id": "0"})
    env.step(bad[0])
    env.step(tool_call_text("list_all_airports", {}))
    _, _, term, *_ = env.step(bad[2])
    assert term and env.num_errors == 2
    env = make(max_errors=None)
    env.reset(options={"task_id": "0"})
    for _ in range(12):
        _, _, term, *_ = env.step(bad[0])
        assert not term
    r, info, _ = play(env, [STOP])
    assert r == 1.0 and env.num_errors == 12
    with pytest.raises(ValueError):
        make(max_errors=0)


def test_prompt_contains_policy_tools_and_protocol():
    env = make()
    env.reset(options={"task_id": "3"})
    p = env.prompt()
    assert "Airline Agent Policy" in p and '"name": "book_reservation"' in p and "<tool_call>" in p
    env.step(tool_call_text("get_user_details", {"user_id": "x"}))
    assert "Prior to this step" in env.prompt()


def test_pass_hat_k_and_summary():
    rows = [{"task_id": "a", "won": w, "score": float(w), "category": "state_change", "error": None}
            for w in (True, True, False, True)]
    rows += [{"task_id": "b", "won": True, "score": 1.0, "category": "no_action", "error": None}] * 4
    rows += [{"task_id": "b", "won": False, "score": 0.0, "category": "no_action", "error": {"kind": "env_crash"}}]
    assert pass_hat_k(rows, 1) == pytest.approx((0.75 + 1.0) / 2)
    assert pass_hat_k(rows, 2) == pytest.approx((3 / 6 + 1.0) / 2)
    assert pass_hat_k(rows, 4) == pytest.approx((0.0 + 1.0) / 2)
    s = tau_summary(rows)
    assert s["errors"] == 1 and s["episodes"] == 8 and set(s["pass_hat_k"]) == {1, 2, 3, 4}
    assert s["category_success"] == {"no_action": 1.0, "state_change": 0.75}
    assert s["avg_reward"] == pytest.approx(7 / 8)


def test_task_dict_option_and_data_dir(tmp_path):
    from agentgym.data import shared_data_dirs
    from agentgym.errors import DataNotFoundError, TaskError

    env = make()
    raw = json.loads((env.domain.path / "tasks.json").read_text(encoding="utf-8"))
    custom = dict(raw[3], id="custom-3")
    custom["evaluation_criteria"] = dict(custom["evaluation_criteria"], communicate_info=["42"])
    obs, info = env.reset(options={"task": custom})
    assert info["task_id"] == "custom-3" and info["category"] == "info_only"
    r, info, _ = play(env, gold_responses(env.task))
    assert r == 1.0 and info["reward_info"]["communicate_checks"] == [{"info": "42", "met": True}]
    # A custom task that reuses a task id with another gold is scored against its own gold.
    cancel_task = next(t for t in env.domain.tasks.values()
                       if [a.name for a in t.gold_actions if a.name in WRITE_TOOLS] == ["cancel_reservation"])
    env.reset(options={"task_id": cancel_task.task_id})
    assert play(env, gold_responses(cancel_task))[0] == 1.0
    no_gold = dict(next(d for d in raw if d["id"] == cancel_task.task_id))
    no_gold["evaluation_criteria"] = dict(no_gold["evaluation_criteria"], actions=[], communicate_info=[])
    env.reset(options={"task": no_gold})
    assert play(env, gold_responses(cancel_task))[0] == 0.0
    with pytest.raises(TaskError):
        env.reset(options={"task": {"id": "x"}})
    with pytest.raises(TaskError):
        env.reset(options={"task": dict(raw[0], initial_state={"initialization_actions": []})})
    with pytest.raises(DataNotFoundError):
        make(data_dir=tmp_path / "missing")
    staged = [d / "tau2_airline" for d in shared_data_dirs() if (d / "tau2_airline" / "db.json").exists()]
    if staged:  # the staged copy is the same data as the package's
        other = make(data_dir=staged[0])
        assert other.task_ids() == env.task_ids()
        assert other.domain.db["reservations"]["4WQ150"] == env.domain.db["reservations"]["4WQ150"]


def test_openai_messages_record_the_conversation():
    env = make()
    env.reset(options={"task_id": "14"})
    env.step(tool_call_text("get_user_details", {"user_id": "mohamed_silva_9265"}))
    env.step("<tool_call>{broken</tool_call>")
    env.step("<response>Which reservation?</response>")
    msgs = env.messages()
    assert [m["role"] for m in msgs] == ["system", "assistant", "user", "assistant", "tool", "assistant", "tool",
                                        "assistant", "user"]
    assert "Airline Agent Policy" in msgs[0]["content"]
    call, result = msgs[3], msgs[4]
    assert call["tool_calls"][0]["function"]["name"] == "get_user_details"
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"user_id": "mohamed_silva_9265"}
    assert result["tool_call_id"] == call["tool_calls"][0]["id"] and "mohamed_silva_9265" in result["content"]
    assert msgs[6]["content"].startswith("Error:") and msgs[7]["content"] == "Which reservation?"
    # The default prompt keeps the whole conversation, not just the last two turns.
    assert "mohamed_silva_9265" in env.prompt().split("Prior to this step")[1]
    json.dumps(msgs)


def test_progress_follows_tau2s_action_check():
    """τ² compares the keys of the agent's call (compare_args unset) with Python's ==, over every call of the episode,
    refused ones included: a call with no arguments matches any gold action of its name."""
    env = make()
    task = next(t for t in env.domain.tasks.values() if len(t.gold_actions) >= 2
                and all(a.compare_args is None for a in t.gold_actions))
    env.reset(options={"task_id": task.task_id})
    first = task.gold_actions[0]
    _, _, _, _, info = env.step(tool_call_text(first.name, {}))  # refused: missing arguments
    assert info["action_valid"] is False
    matched = sum(a.name == first.name for a in task.gold_actions)
    assert env.progress() == pytest.approx(matched / len(task.gold_actions))
    key = next(iter(first.arguments))
    wrong = {key: "nope"}
    env.reset(options={"task_id": task.task_id})
    env.step(tool_call_text(first.name, wrong))
    assert env.progress() == 0.0
