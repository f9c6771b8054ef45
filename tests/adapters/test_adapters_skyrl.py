"""adapters.skyrl: every agentgym env registered with SkyRL-Gym (skyrl-gym 0.4) and played through
``skyrl_gym.make(env_class, env_config=..., extras=...)``, ``init(prompt)`` and ``step(action)`` — the calls SkyRL's
generator makes — to the same rewards, ``done`` flags, observations and typed ``info`` as in-process play, with the
oracle and a random policy; the rows of :func:`adapters.skyrl.dataset_rows` drive episodes as a SkyRL dataset would.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="the SkyRL-Gym registration needs: pip install -e '.[skyrl]'")

import agentgym  # noqa: E402
from adapters import skyrl as sk  # noqa: E402
from agentgym.errors import TaskError  # noqa: E402
from agentgym.registration import env_ids, get_entry  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

CASES = {"TextCraft-v0": ("adapt-test", 2), "WebShop-v0": ("test", 2), "TauAirline-v0": ("test", 2)}


def _jsonable(x):
    return json.loads(json.dumps(x))


def _in_process(env_id, split, task_id, seed, policy, max_turns):
    env = agentgym.make(env_id, split=split, max_turns=max_turns)
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    first = env.prompt()
    rng = np.random.default_rng([seed, 11])
    steps, done = [], False
    while not done:
        a = env.oracle_action() if policy == "oracle" else env.random_action(rng)
        obs, r, term, trunc, info = env.step(a)
        done = term or trunc
        steps.append((a, obs, r, term, trunc, _jsonable(info), env.prompt()))
    return first, steps


def test_skyrl_registers_every_env_idempotently():
    assert set(env_ids()) <= set(skyrl_gym.registry)
    assert sk.register_all() == env_ids()  # again: no RegistrationError
    assert skyrl_gym.registry["TextCraft-v0"].entry_point == "adapters.skyrl:AgentGymTextEnv"


@pytest.mark.parametrize("policy", ["oracle", "random"])
@pytest.mark.parametrize("env_id", list(CASES))
def test_skyrl_make_plays_like_in_process(env_id, policy):
    split, n = CASES[env_id]
    ok, why = get_entry(env_id).split_available(split)
    if not ok:
        pytest.skip(f"{env_id} {split}: {why}")
    max_turns = 50
    totals = []
    for seed, task_id in enumerate(agentgym.make(env_id, split=split).task_ids(n)):
        first, steps = _in_process(env_id, split, task_id, seed, policy, max_turns)
        # SkyRL passes its generator config as an OmegaConf DictConfig, and always adds its own max_turns
        cfg = OmegaConf.create({"split": split})
        env = skyrl_gym.make(env_id, env_config=cfg, extras={"task_id": task_id, "seed": seed,
                                                             "max_turns": max_turns})
        assert isinstance(env, skyrl_gym.Env) and env.max_turns == max_turns
        system = {"role": "system", "content": "You are a careful agent."}
        messages, meta = env.init([system, {"role": "user", "content": "(replaced by the env's prompt)"}])
        assert messages == [system, {"role": "user", "content": first}]
        assert meta["info"]["task_id"] == task_id
        total = 0.0
        for i, (a, obs, r, term, trunc, info, prompt) in enumerate(steps):
            out = env.step(a)
            assert out["reward"] == r and out["done"] == (term or trunc)
            assert out["metadata"]["info"] == info and out["metadata"]["observation"] == obs
            assert (out["metadata"]["terminated"], out["metadata"]["truncated"]) == (term, trunc)
            assert out["observations"] == ([] if out["done"] else [{"role": "user", "content": prompt}])
            total += out["reward"]
        assert out["done"]
        metrics = env.get_metrics()
        assert metrics["turns"] == len(steps) and metrics["return"] == pytest.approx(total)
        assert metrics["won"] == float(steps[-1][5]["won"])
        env.close()
        totals.append(total)
    if policy == "oracle":
        assert all(t > 0 for t in totals), totals
    agg = sk.AgentGymTextEnv.aggregate_metrics([{"won": 1.0, "turns": 4}, {"won": 0.0, "turns": 6}])
    assert agg["won"] == 0.5 and agg["turns"] == 5


def test_skyrl_text_observations_and_dataset_rows():
    rows = sk.dataset_rows("TextCraft-v0", "adapt-test", episodes=2, seeds=(0, 3))
    assert len(rows) == 4 and {r["env_class"] for r in rows} == {"TextCraft-v0"}
    assert rows[1]["task_id"] == rows[0]["task_id"] and rows[1]["seed"] == 3
    for row in rows:
        # SkyRL hands a row's other columns to the env as extras (the generator adds max_turns)
        extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")} | {"max_turns": 50}
        env = skyrl_gym.make(row["env_class"], env_config={"observation": "text"}, extras=extras)
        messages, _ = env.init(row["prompt"])
        assert messages == row["prompt"]  # the row holds the env's own first prompt for this reset
        ref = agentgym.make("TextCraft-v0", split="adapt-test")
        ref.reset(seed=row["seed"], options={"task_id": row["task_id"]})
        out = {"done": False}
        while not out["done"]:
            a = ref.oracle_action()
            obs, r, term, trunc, _ = ref.step(a)
            out = env.step(a)
            assert out["reward"] == r
            assert out["observations"] == ([] if term or trunc else [{"role": "user", "content": obs}])
        assert env.get_metrics()["won"] == 1.0
    # the split may come with the row (extra_info), over the env_config's
    row = dict(sk.dataset_rows("TextCraft-v0", "val", episodes=1)[0])
    row.pop("task_id")
    env = skyrl_gym.make("TextCraft-v0", env_config={"split": "adapt-test"},
                         extras={k: v for k, v in row.items() if k not in ("prompt", "env_class")})
    assert env.init(row["prompt"])[0] == row["prompt"] and env.env.split == "val"


def test_skyrl_failures_are_errors_not_rewards():
    env = skyrl_gym.make("TextCraft-v0", env_config={}, extras={"task_id": "no-such-task", "seed": 0})
    with pytest.raises(TaskError):
        env.init([])
    with pytest.raises(ValueError, match="observation"):
        skyrl_gym.make("TextCraft-v0", env_config={"observation": "pixels"}, extras={})
    with pytest.raises(TypeError, match="no_such_kwarg"):
        skyrl_gym.make("TextCraft-v0", env_config={"no_such_kwarg": 1}, extras={})
