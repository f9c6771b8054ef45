"""The group runner: structure, the TrajectoryBatch, backends, typed errors."""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

import numpy as np
import pytest

import agentgym  # noqa: F401 - registers the env ids
from agentgym.eval.results import episode_fields
from agentgym.rollout.loading import load_policy
from agentgym.rollout.policy import OraclePolicy, RandomPolicy
from agentgym.rollout.runner import collect_groups

sys.path.insert(0, str(Path(__file__).parent))
import crashy_env  # noqa: E402,F401 - registers CrashyTextCraft-v0

TASKS = ["gen-d2-0", "gen-d3-1", None]


def test_groups_share_first_observation_and_columns():
    res = collect_groups("TextCraft-v0", TASKS, 4, RandomPolicy(), env_kwargs={"split": "gen-depth2"},
                         max_turns=12, seed=5)
    assert len(res.trajectories) == 12 and not res.errors
    for g in range(3):
        members = [t for t in res.trajectories if t.group_id == g]
        assert len({t.first_observation for t in members}) == 1
        assert len({t.task_id for t in members}) == 1 and all(t.seed == 5 + g for t in members)
    # Members of a group act with different generators, so they diverge.
    assert len({tuple(r.response for r in t.turns) for t in res.trajectories if t.group_id == 0}) > 1
    b = res.batch
    n = sum(len(t.turns) for t in res.trajectories)
    assert len(b) == n
    assert b.reward.dtype == np.float32 and b.obs_hash.dtype == np.int64 and b.process_ok.dtype == np.int8
    for t in res.trajectories:
        rows = np.flatnonzero(b.traj_id == t.traj_id)
        assert list(b.turn_idx[rows]) == list(range(len(t.turns)))
        assert list(b.done[rows]) == [False] * (len(t.turns) - 1) + [True]
        assert b.truncated[rows[-1]] == t.truncated and not b.truncated[rows[:-1]].any()
        assert set(b.group_id[rows]) == {t.group_id} and set(b.task_id[rows]) == {t.task_id}
        assert np.all(b.success[rows] == t.score)
        # obs_hash of turn k is the hash of what the agent saw before acting.
        assert b.obs_hash[rows[1]] == t.turns[0].info["obs_hash"]
        assert list(b.valid_action[rows]) == [r.info["action_valid"] for r in t.turns]
        assert list(b.action_key[rows]) == [r.info["action_key"] for r in t.turns]


def test_turn_cap_truncates():
    res = collect_groups("TextCraft-v0", ["gen-d3-0"], 2, RandomPolicy(), env_kwargs={"split": "gen-depth3"},
                         max_turns=3)
    for t in res.trajectories:
        assert len(t.turns) <= 3
        assert t.won or (t.truncated and len(t.turns) == 3)


def test_oracle_groups_win():
    res = collect_groups("TextCraft-v0", ["gen-d2-3", "gen-d4-0"], 2, OraclePolicy(),
                         env_kwargs={"split": "gen-depth2"})
    assert all(t.won for t in res.trajectories) and res.batch.success.min() == 1.0


def test_worker_count_does_not_change_results():
    kw = dict(env_kwargs={"split": "gen-depth2"}, max_turns=10, seed=11)
    a = collect_groups("TextCraft-v0", TASKS, 3, RandomPolicy(), workers=0, **kw)
    b = collect_groups("TextCraft-v0", TASKS, 3, RandomPolicy(), workers=2, **kw)
    assert [episode_fields(t) for t in a.trajectories] == [episode_fields(t) for t in b.trajectories]
    assert [[r.response for r in t.turns] for t in a.trajectories] == \
           [[r.response for r in t.turns] for t in b.trajectories]
    for k, v in a.batch.to_dict().items():
        np.testing.assert_array_equal(v, b.batch.to_dict()[k], err_msg=k)


def text_policy(prompts):
    return ["<think>look</think><action>inventory</action>" for _ in prompts]


def test_text_policy_batched_calls():
    calls = []

    def policy(prompts):
        calls.append(len(prompts))
        return text_policy(prompts)

    res = collect_groups("TextCraft-v0", ["gen-d1-0", "gen-d1-1"], 3, policy, env_kwargs={"split": "gen-depth1"},
                         max_turns=4)
    assert calls == [6, 6, 6, 6]
    assert all(len(t.turns) == 4 and t.truncated for t in res.trajectories)


@pytest.mark.parametrize("workers", [0, 2])
def test_env_exception_becomes_typed_error(workers):
    res = collect_groups("crashy_env:CrashyTextCraft-v0", ["gen-d2-0", "gen-d2-1"], 2, OraclePolicy(),
                         env_kwargs={"crash_on_turn": 2, "crash_on_reset_task": "gen-d2-1"}, workers=workers)
    step_fail = [t for t in res.trajectories if t.group_id == 0]
    reset_fail = [t for t in res.trajectories if t.group_id == 1]
    for t in step_fail:
        assert t.error.kind == "env_crash" and t.error.stage == "step" and "simulated engine crash" in t.error.message
        assert t.error.exception == "ValueError" and len(t.turns) == 1
        assert episode_fields(t)["error"]["kind"] == "env_crash"
    for t in reset_fail:
        assert t.error.stage == "reset" and t.error.exception == "OSError" and not t.turns
    assert res.batch is None  # errored trajectories are marked, not scored


def test_errored_trajectories_are_left_out_of_the_batch():
    res = collect_groups("crashy_env:CrashyTextCraft-v0", ["gen-d2-0", "gen-d2-5"], 2, OraclePolicy(),
                         env_kwargs={"crash_on_turn": 99, "crash_on_reset_task": "gen-d2-5"})
    assert len(res.errors) == 2 and res.batch is not None
    assert set(res.batch.group_id.tolist()) == {0}


@pytest.mark.parametrize("policy", [
    lambda prompts: 1 / 0,
    lambda prompts: ["<action>inventory</action>"],  # wrong length
    lambda prompts: [None for _ in prompts],
])
def test_bad_policy_becomes_policy_error(policy):
    res = collect_groups("TextCraft-v0", ["gen-d1-0"], 2, policy, env_kwargs={"split": "gen-depth1"})
    assert all(t.error is not None and t.error.kind == "policy_error" for t in res.trajectories)


class InterruptingPolicy(OraclePolicy):
    def act(self, env, rng):
        raise KeyboardInterrupt


def interrupting_text_policy(prompts):
    raise KeyboardInterrupt


# A text policy runs in the driver under every backend; an env policy runs next to the env (in-process here).
@pytest.mark.parametrize("policy, workers", [(interrupting_text_policy, 0), (interrupting_text_policy, 2),
                                             (InterruptingPolicy(), 0)], ids=["text", "text-workers", "env-policy"])
def test_ctrl_c_in_the_policy_stops_the_run(policy, workers):
    """KeyboardInterrupt is not an episode failure: it propagates out of collect_groups (and the workers go)."""
    with pytest.raises(KeyboardInterrupt):
        collect_groups("TextCraft-v0", ["gen-d1-0"], 2, policy, env_kwargs={"split": "gen-depth1"}, workers=workers)
    assert not multiprocessing.active_children()


def test_ctrl_c_or_exit_in_the_env():
    for exc in (KeyboardInterrupt, SystemExit):
        with pytest.raises(exc):
            collect_groups("crashy_env:CrashyTextCraft-v0", ["gen-d2-0"], 1, OraclePolicy(),
                           env_kwargs={"crash_on_turn": 1, "crash_with": exc.__name__})


def test_worker_that_exits_marks_its_episodes():
    # SystemExit ends the worker process (it is not turned into a record there); the driver marks the episodes of
    # that worker with a typed error instead of raising (here both workers exit, so every episode is marked).
    res = collect_groups("crashy_env:CrashyTextCraft-v0", ["gen-d2-0", "gen-d2-1"], 1, OraclePolicy(), workers=2,
                         env_kwargs={"crash_on_turn": 2, "crash_with": "SystemExit"})
    for t in res.trajectories:
        assert t.error.kind == "env_crash" and t.error.stage == "step" and "died" in t.error.message
        assert len(t.turns) == 1


def test_load_policy_specs():
    assert isinstance(load_policy("oracle"), OraclePolicy)
    assert load_policy("test_runner:text_policy") is text_policy
    with pytest.raises(Exception, match="unknown policy"):
        load_policy("gpt")


def test_play_takes_explicit_episode_specs_and_lockstep_batches_through_a_small_pool():
    from agentgym.rollout.backends import make_pool
    from agentgym.rollout.records import EpisodeSpec, Hooks
    from agentgym.rollout.runner import Schedule, env_factory, play

    specs = [EpisodeSpec(task=t, seed=3 + i, policy_seed=(3 + i, i, 0), group=i, trial=i % 2)
             for i, t in enumerate(["gen-d2-0", "gen-d2-1", None, "gen-d2-3", "gen-d2-4"])]
    seen = []
    pool = make_pool(env_factory("TextCraft-v0", {"split": "gen-depth2"}, 8), 2, 0)
    try:
        lock = play(pool, iter(specs), RandomPolicy(), schedule=Schedule("lockstep"),
                    hooks=Hooks(on_trajectory=seen.append))
        asyn = play(pool, specs, RandomPolicy(), schedule="async")
    finally:
        pool.close()
    assert [t.traj_id for t in lock] == list(range(5)) and sorted(t.traj_id for t in seen) == list(range(5))
    assert [(t.group_id, t.seed, t.trial, t.policy_seed) for t in lock] == \
        [(s.group, s.seed, s.trial, s.policy_seed) for s in specs]
    assert [episode_fields(t) for t in lock] == [episode_fields(t) for t in asyn]
    # The same episodes as collect_groups' B x 1 groups with those seeds and policy seeds.
    res = collect_groups("TextCraft-v0", [s.task for s in specs], 1, RandomPolicy(), seeds=[s.seed for s in specs],
                         policy_seeds=[s.policy_seed[:-1] for s in specs], env_kwargs={"split": "gen-depth2"},
                         max_turns=8)
    assert [[r.response for r in t.turns] for t in res.trajectories] == [[r.response for r in t.turns] for t in lock]


def test_each_name_has_one_import_path():
    """No release was published, so names that moved have no old paths: each lives in its one module."""
    import importlib

    from agentgym.rollout import records

    for module, name in [("agentgym.rollout.runner", "Trajectory"), ("agentgym.rollout.runner", "to_trajectory_batch"),
                         ("agentgym.rollout.policy", "load_policy"),
                         ("agentgym.rollout.openai_policy", "PolicyResponse"),
                         ("agentgym.envs.appworld.pool", "run_evaluator"),
                         ("agentgym.envs.appworld.env", "scenario_goal_completion")]:
        assert not hasattr(importlib.import_module(module), name), f"{module}.{name}"
    t = records.Trajectory(traj_id=0, group_id=0, task=None, seed=0, member=0)
    assert not hasattr(t, "summary") and not hasattr(t, "finished")  # rows: agentgym.eval.results.episode_fields
    import adapters

    assert not (Path(adapters.__file__).parent / "openenv.py").exists()  # the server is agentgym.serve


README_SNIPPET = '''
from agentgym.rollout.runner import collect_groups
from agentgym.rollout.policy import RandomPolicy

def my_policy(prompts: list[str]) -> list[str]:          # the batched Policy protocol
    return ["<action>inventory</action>" for _ in prompts]

res = collect_groups("TextCraft-v0", ["gen-d2-0", "gen-d3-1"], group_size=8, policy=my_policy,
                     env_kwargs={"split": "gen-depth2"}, max_turns=30, workers=2)
print("batch rows:", len(res.batch), "errors:", len(res.errors))
'''


@pytest.mark.parametrize("guarded", [False, True])
def test_readme_snippet_in_a_script_with_and_without_the_main_guard(tmp_path, guarded):
    """The README's collect_groups(..., workers=2) pasted into a script: without `if __name__ == "__main__":` the
    spawned workers re-run the script, and the call raises one UnguardedMainError naming the guard (it once returned
    batch=None with 16 env_crash records); with the guard it plays."""
    import subprocess
    import textwrap

    body = README_SNIPPET
    if guarded:
        head, call = body.split("res = collect_groups", 1)
        body = head + 'if __name__ == "__main__":\n' + textwrap.indent("res = collect_groups" + call, "    ")
    script = tmp_path / "rollout_script.py"
    script.write_text(body)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    if guarded:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "errors: 0" in proc.stdout and "batch rows:" in proc.stdout
        return
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("agentgym.errors.UnguardedMainError: the rollout's worker processes could not start: "
                           f"{script} starts a rollout"), proc.stderr[-3000:]
    assert 'if __name__ == "__main__":' in last and "workers=0" in last
    assert proc.stderr.count("Traceback") == 1  # the parent's; the workers exit without one
