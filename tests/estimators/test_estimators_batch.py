"""TrajectoryBatch construction and validation (spec 1.1-1.3), registry and config errors."""

from __future__ import annotations

import numpy as np
import pytest

import estimators as E


def cols(**over):
    base = dict(
        group_id=np.array([0, 0, 0, 1]),
        traj_id=np.array([1, 1, 2, 3]),
        turn_idx=np.array([0, 1, 0, 0]),
        reward=np.array([0.0, 1.0, 0.0, 0.5]),
        done=np.array([False, True, True, True]),
    )
    base.update(over)
    return base


def rows_of(err):
    return sorted(err.value.rows.tolist())


def test_runner_interface_keywords_and_dtypes():
    # the env runner's call: spec column names, task_id as str, unsigned 64-bit digests
    b = E.TrajectoryBatch(
        group_id=np.array([0, 0, 0]), task_id=np.array(["a", "a", "a"]), traj_id=np.array([5, 5, 6]),
        turn_idx=np.array([0, 1, 0]), reward=np.array([0.0, 1.0, 0.0]), done=np.array([0, 1, 1], bool),
        truncated=np.array([0, 0, 1], bool), success=np.array([1.0, 1.0, 0.0]),
        obs_hash=np.array([2**63 + 5, 7, 9], dtype=np.uint64), valid_action=np.array([1, 1, 0], bool),
        action_key=np.array([1, 2, 3], dtype=np.int64), action_parsed=np.array([1, 1, 0], bool),
        process_ok=np.array([1, -1, 0]))
    assert b.reward.dtype == np.float32 and b.turn_idx.dtype == np.int32 and b.obs_hash.dtype == np.int64
    assert b.process_ok.dtype == np.int8 and b.task_id.dtype.kind == "U"
    assert set(b.columns()) == {"group_id", "task_id", "traj_id", "turn_idx", "reward", "done", "truncated",
                                "success", "obs_hash", "valid_action", "action_key", "action_parsed", "process_ok"}
    assert set(b.to_dict()) == set(b.columns()) and b.info_gain is None and len(b) == 3
    assert "embedding" in E.TrajectoryBatch.column_names()
    assert b.n_trajectories == 2 and b.n_groups == 1
    np.testing.assert_allclose(b.traj_return, [1.0, 0.0])
    for name in E.available():
        if name in ("sgcd", "pvpo", "igpo", "a2tgpo", "bigpo"):
            continue
        kw = {"embedder": "identity"} if name == "bipace" else {}
        E.compute_advantage(name, b, **kw)


def test_canonical_order_is_rollout_major():
    # rows shuffled: traj 9 appears first, then traj 4; canonical order = traj 9 turns 0,1 then traj 4 turns 0,1
    b = E.TrajectoryBatch(group_id=np.zeros(4), traj_id=np.array([9, 4, 9, 4]), turn_idx=np.array([1, 1, 0, 0]),
                          reward=np.zeros(4), done=np.array([1, 1, 0, 0], bool))
    assert b.canonical_order.tolist() == [2, 0, 3, 1]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_reward(bad):
    with pytest.raises(E.BatchValidationError, match="'reward'") as err:
        E.TrajectoryBatch(**cols(reward=np.array([0.0, bad, 0.0, 0.5])))
    assert err.value.column == "reward" and rows_of(err) == [1]


def test_done_missing_repeated_or_not_last():
    with pytest.raises(E.BatchValidationError, match="'done'.*no row with done") as err:
        E.TrajectoryBatch(**cols(done=np.array([False, False, True, True])))
    assert err.value.column == "done" and rows_of(err) == [0, 1]
    with pytest.raises(E.BatchValidationError, match="'done'.*repeated") as err:
        E.TrajectoryBatch(**cols(done=np.array([True, True, True, True])))
    assert rows_of(err) == [0, 1]
    with pytest.raises(E.BatchValidationError, match="'done'.*not on the last turn"):
        E.TrajectoryBatch(**cols(done=np.array([True, False, True, True])))


def test_trajectory_in_two_groups():
    with pytest.raises(E.BatchValidationError, match="'group_id'.*more than one group") as err:
        E.TrajectoryBatch(**cols(group_id=np.array([0, 1, 0, 1])))
    assert err.value.column == "group_id" and rows_of(err) == [0, 1]


def test_zero_embedding():
    emb = np.ones((4, 3), np.float32)
    emb[2] = 0
    with pytest.raises(E.BatchValidationError, match="'embedding'") as err:
        E.TrajectoryBatch(**cols(embedding=emb))
    assert rows_of(err) == [2]
    b = E.TrajectoryBatch(**cols(embedding=emb + 1))
    np.testing.assert_allclose(np.linalg.norm(b.embedding, axis=1), 1.0, rtol=1e-6)
    for bad in (np.nan, np.inf):  # a non-finite entry makes the row's norm non-finite
        e2 = np.ones((4, 3), np.float32)
        e2[1, 2] = bad
        with pytest.raises(E.BatchValidationError, match="'embedding'.*non-finite") as err:
            E.TrajectoryBatch(**cols(embedding=e2))
        assert rows_of(err) == [1]


def test_embedding_normalization_float32():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(4, 3584)).astype(np.float32)
    # rows whose float32 squared norm would underflow / overflow, and a subnormal one: normalized through float64
    emb[1] *= np.float32(1e-22)
    emb[2] *= np.float32(1e22)
    emb[3] = 0
    emb[3, 7] = np.float32(1e-40)
    caller = emb.copy()
    b = E.TrajectoryBatch(**cols(embedding=emb))
    assert b.embedding.dtype == np.float32 and b.embedding is not emb
    np.testing.assert_array_equal(emb, caller)  # the caller's float32 array is left as it was
    x64 = caller.astype(np.float64)
    expect = x64 / np.linalg.norm(x64, axis=1, keepdims=True)
    np.testing.assert_allclose(b.embedding, expect, rtol=2e-6, atol=1e-9)
    assert b.embedding[3, 7] == 1.0
    assert b.embedding_norm_min == pytest.approx(1e-40, rel=1e-2)
    # float64 input (the constructor's own float32 copy is scaled in place) gives the same rows
    b64 = E.TrajectoryBatch(**cols(embedding=x64))
    np.testing.assert_allclose(b64.embedding, expect, rtol=2e-6, atol=1e-9)


def test_embedding_views_of_the_callers_memory_are_never_scaled_in_place(tmp_path):
    # np.asarray only wraps these (same memory, another object): they must come back untouched.
    emb = np.random.default_rng(1).normal(size=(4, 16)).astype(np.float32)
    ro = np.lib.format.open_memmap(tmp_path / "e.npy", mode="w+", dtype=np.float32, shape=emb.shape)
    ro[:] = emb
    ro.flush()
    for given in (np.asmatrix(emb.copy()), np.load(tmp_path / "e.npy", mmap_mode="r"),
                  np.load(tmp_path / "e.npy", mmap_mode="r+")):
        before = np.array(given, copy=True)
        b = E.TrajectoryBatch(**cols(embedding=given))
        np.testing.assert_array_equal(np.asarray(given), before)
        np.testing.assert_allclose(np.linalg.norm(b.embedding, axis=1), 1.0, rtol=1e-6)


def test_import_estimators_pulls_in_no_trainer_and_no_agentgym():
    """``estimators`` is a leaf package: a fresh interpreter that imports it (and its loss module) holds no trainer
    (trl, verl), no agentgym (nor its adapters) and no torch / transformers."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, estimators, estimators.losses\n"
            "banned = ('trl', 'verl', 'agentgym', 'adapters', 'torch', 'transformers')\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
            "assert not bad, bad\n"
            "assert 'estimators.bipace' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_token_turn_index_naming_no_turn():
    tok = dict(row_traj_id=np.array([1, 2]), response_mask=np.array([[1, 1], [1, 0]], bool),
               token_turn_idx=np.array([[0, 1], [1, -1]]))  # traj 2 has only turn 0
    with pytest.raises(E.BatchValidationError, match="'token_turn_idx'") as err:
        E.TrajectoryBatch(**cols(**tok))
    assert rows_of(err) == [1]
    with pytest.raises(E.BatchValidationError, match="'row_traj_id'"):
        E.TrajectoryBatch(**cols(row_traj_id=np.array([1, 99]), response_mask=np.ones((2, 2), bool),
                                 token_turn_idx=np.zeros((2, 2))))


def test_other_contract_checks():
    with pytest.raises(E.BatchValidationError, match="'turn_idx'") as err:
        E.TrajectoryBatch(**cols(turn_idx=np.array([0, 2, 0, 0])))
    assert rows_of(err) == [0, 1]
    with pytest.raises(E.BatchValidationError, match="'turn_idx'"):
        E.TrajectoryBatch(**cols(turn_idx=np.array([0, 0, 0, 0])))
    with pytest.raises(E.BatchValidationError, match="'reward'.*length"):
        E.TrajectoryBatch(**cols(reward=np.zeros(3)))
    with pytest.raises(E.BatchValidationError, match="'success'"):
        E.TrajectoryBatch(**cols(success=np.array([1.0, 0.0, 0.0, 0.0])))
    with pytest.raises(E.BatchValidationError, match="'truncated'"):
        E.TrajectoryBatch(**cols(truncated=np.array([True, False, False, False])))
    with pytest.raises(E.BatchValidationError, match="'process_ok'"):
        E.TrajectoryBatch(**cols(process_ok=np.array([1, 2, 0, 0])))
    with pytest.raises(E.BatchValidationError, match="'old_logprob'"):
        E.TrajectoryBatch(**cols(row_traj_id=np.array([1]), response_mask=np.ones((1, 2), bool),
                                 token_turn_idx=np.zeros((1, 2)), old_logprob=np.array([[0.0, np.nan]])))
    with pytest.raises(TypeError):
        E.TrajectoryBatch(**cols(rewards=np.zeros(4)))  # misspelt column


def test_missing_columns_raise_before_computing():
    b = E.TrajectoryBatch(**cols())
    cases = {"gigpo": "obs_hash", "gvpo": "process_ok", "a2tgpo": "info_gain", "pvpo": "task_id",
             "dapo": "success", "bigpo": "embedding", "sgcd": "response_mask"}
    for name, col in cases.items():
        kw = {"v_table": E.StaticValueTable({})} if name == "pvpo" else {}
        if name == "bigpo":
            kw = {"invalid_action_penalty": 0.0}
        with pytest.raises(E.MissingColumnError, match=f"'{col}'") as err:
            E.compute_advantage(name, b, **kw)
        assert err.value.column == col
    # GiGPO's default invalid-action penalty needs valid_action; with the penalty off it does not
    b2 = E.TrajectoryBatch(**cols(obs_hash=np.arange(4)))
    with pytest.raises(E.MissingColumnError, match="valid_action"):
        E.compute_advantage("gigpo", b2)
    E.compute_advantage("gigpo", b2, invalid_action_penalty=0.0)


def test_nan_info_gain_on_a_process_turn():
    b = E.TrajectoryBatch(**cols(info_gain=np.array([np.nan, np.nan, np.nan, np.nan])))
    with pytest.raises(E.BatchValidationError, match="'info_gain'") as err:
        E.compute_advantage("a2tgpo", b)
    assert rows_of(err) == [0]


def test_registry_and_configs():
    assert E.available() == sorted(["grpo", "dr_grpo", "rloo", "dapo", "gigpo", "hgpo", "bigpo", "bipace", "igpo",
                                    "a2tgpo", "gvpo", "pvpo", "sgcd"])
    b = E.TrajectoryBatch(**cols())
    with pytest.raises(E.ConfigError, match="unknown config key.*gama.*valid keys"):
        E.compute_advantage("gigpo", b, gama=0.9)
    with pytest.raises(E.ConfigError, match="unknown estimator"):
        E.compute_advantage("ppo", b)
    with pytest.raises(E.ConfigError, match="mode"):
        E.make_config("gigpo", mode="median")
    with pytest.raises(E.ConfigError):
        E.make_config("bipace", pace="z")
    cfg = E.make_config("bipace")
    assert cfg.pace == "q" and cfg.resolved_eps() == 0.10 and cfg.fallback == "rloo" and cfg.gamma == 0.95
    assert E.make_config("bigpo").pace == "gigpo"
    assert E.make_config("bipace", embedder="hash_ngram").resolved_eps() == 0.25
    assert E.make_config("a2tgpo") == E.A2TGPOConfig(gamma=1.0, alpha=0.3, clip_lambda=0.3)
    assert E.make_config("sgcd") == E.SGCDConfig(1.0, 2.0, 100, "rkl", 0.1, 1.5)
    with pytest.raises(Exception):
        cfg.eps = 0.5  # frozen
    r = E.compute_advantage("grpo", b, config=E.OutcomeConfig(verl_compat=True))
    assert r.estimator == "grpo" and r.config.verl_compat

    @E.register("test_zero", E.OutcomeConfig)
    def _zero(batch, cfg):
        from estimators.result import finalize
        return finalize(batch, "test_zero", cfg, np.zeros(batch.n_turns))

    try:
        assert "test_zero" in E.available()
        assert np.all(E.compute_advantage("test_zero", b).turn_adv == 0)
    finally:
        from estimators.registry import _REGISTRY
        _REGISTRY.pop("test_zero")


def test_hash_ngram_embedder_through_the_estimator():
    b = E.TrajectoryBatch(**cols(obs_hash=np.arange(4), action_key=np.zeros(4), valid_action=np.ones(4, bool)))
    texts = ["you are in the kitchen", "you are in the kitchen.", "a garden", "a hall"]
    r = E.compute_advantage("bipace", b, embedder="hash_ngram", obs_text=texts)
    assert r.diagnostics["eps_used"] == 0.25 and r.diagnostics["n_step_clusters"] <= 3
    with pytest.raises(ValueError, match="obs_text"):
        E.compute_advantage("bipace", b, embedder="hash_ngram")
