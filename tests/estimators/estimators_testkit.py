"""Random TrajectoryBatch generator and hypothesis strategies for the estimators tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from estimators import TrajectoryBatch


@dataclass(frozen=True)
class Shape:
    seed: int
    n_groups: int
    max_g: int
    max_t: int
    reward_kind: str  # binary | continuous | equal | dense
    hash_pool: int
    p_invalid: float
    shuffle: bool
    tokens: str | None  # None | step | traj
    n_keys: int


@st.composite
def shapes(draw, tokens=st.sampled_from([None, "step", "traj"]), max_groups=4, max_g=5, max_t=6):
    return Shape(
        seed=draw(st.integers(0, 2**31 - 1)),
        n_groups=draw(st.integers(1, max_groups)),
        max_g=draw(st.integers(1, max_g)),
        max_t=draw(st.integers(1, max_t)),
        reward_kind=draw(st.sampled_from(["binary", "continuous", "equal", "dense"])),
        hash_pool=draw(st.integers(1, 5)),
        p_invalid=draw(st.sampled_from([0.0, 0.3])),
        shuffle=draw(st.booleans()),
        tokens=draw(tokens),
        n_keys=draw(st.integers(1, 4)),
    )


def make_batch(shape: Shape, *, sgcd: bool = False, K: int = 6, emb_dim: int | None = None, info_gain: bool = True,
               L: int = 12, **overrides) -> TrajectoryBatch:
    rng = np.random.default_rng(shape.seed)
    cols: dict[str, list] = {k: [] for k in ("group_id", "task_id", "traj_id", "turn_idx", "reward", "done",
                                             "truncated", "success", "obs_hash", "valid_action", "action_key",
                                             "action_parsed", "process_ok", "info_gain", "is_final_answer")}
    traj_counter = 100
    trajs = []
    for g in range(shape.n_groups):
        G = int(rng.integers(1, shape.max_g + 1))
        for _ in range(G):
            T = int(rng.integers(1, shape.max_t + 1))
            tid = traj_counter
            traj_counter += int(rng.integers(1, 4))
            if shape.reward_kind == "binary":
                final = float(rng.integers(0, 2))
            elif shape.reward_kind == "continuous":
                final = float(np.round(rng.normal(), 3))
            elif shape.reward_kind == "equal":
                final = 0.5
            else:
                final = float(rng.integers(0, 2))
            truncated = bool(rng.random() < 0.2)
            for t in range(T):
                last = t == T - 1
                if shape.reward_kind == "dense":
                    r = float(np.round(rng.uniform(-1, 1), 2)) if not last else final
                else:
                    r = final if last else 0.0
                cols["group_id"].append(10 * g + 7)
                cols["task_id"].append(1000 + g)
                cols["traj_id"].append(tid)
                cols["turn_idx"].append(t)
                cols["reward"].append(r)
                cols["done"].append(last)
                cols["truncated"].append(last and truncated)
                cols["success"].append(1.0 if final > 0 else 0.0)
                cols["obs_hash"].append(int(rng.integers(0, shape.hash_pool)) + 1000 * g * 0)
                valid = bool(rng.random() >= shape.p_invalid)
                cols["valid_action"].append(valid)
                cols["action_key"].append(int(rng.integers(0, shape.n_keys)))
                cols["action_parsed"].append(valid)
                cols["process_ok"].append(int(rng.integers(-1, 2)))
                cols["info_gain"].append(np.nan if last else float(np.round(rng.normal(), 3)))
                cols["is_final_answer"].append(last)
            trajs.append((tid, T))
    n = len(cols["traj_id"])
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    perm = rng.permutation(n) if shape.shuffle else np.arange(n)
    arrays = {k: v[perm] for k, v in arrays.items()}
    if not info_gain:
        arrays.pop("info_gain")
    if emb_dim:
        arrays["embedding"] = rng.normal(size=(n, emb_dim)).astype(np.float32)
    if shape.tokens:
        arrays.update(make_tokens(rng, trajs, shape.tokens, L, sgcd, K))
    arrays.update(overrides)
    return TrajectoryBatch(**arrays)


def make_tokens(rng, trajs, layout, L, sgcd, K):
    rows_tid, masks, ttis = [], [], []
    for tid, T in trajs:
        if layout == "step":
            for t in range(T):
                m = np.zeros(L, dtype=bool)
                n_tok = int(rng.integers(0, L // 2 + 1))
                start = int(rng.integers(0, L - n_tok + 1))
                m[start:start + n_tok] = True
                tt = np.where(m, t, -1)
                rows_tid.append(tid)
                masks.append(m)
                ttis.append(tt)
        else:
            m = np.zeros(L * 2, dtype=bool)
            tt = np.full(L * 2, -1)
            pos = 0
            for t in range(T):
                pos += int(rng.integers(0, 3))  # observation tokens
                n_tok = int(rng.integers(0, 3))
                m[pos:pos + n_tok] = True
                tt[pos:pos + n_tok] = t
                pos += n_tok
            rows_tid.append(tid)
            masks.append(m)
            ttis.append(tt)
    width = max(len(m) for m in masks)
    B = len(masks)
    mask = np.zeros((B, width), dtype=bool)
    tti = np.full((B, width), -1)
    for i, (m, t) in enumerate(zip(masks, ttis)):
        mask[i, :len(m)] = m
        tti[i, :len(t)] = t
    out = dict(row_traj_id=np.asarray(rows_tid), response_mask=mask, token_turn_idx=tti,
               old_logprob=np.where(mask, -rng.uniform(0.01, 3, size=mask.shape), 0.0).astype(np.float32),
               response_len_tokens=mask.sum(1))
    if sgcd:
        shape3 = (B, width, K)
        logits_t = rng.normal(size=(B, width, K + 3)) * rng.uniform(0.5, 3, size=(B, width, 1))
        logits_s = logits_t + rng.normal(scale=0.7, size=logits_t.shape)
        lp_t = logits_t - np.log(np.exp(logits_t).sum(-1, keepdims=True))
        lp_s = logits_s - np.log(np.exp(logits_s).sum(-1, keepdims=True))
        # vocabulary of K+3 ids; the teacher's top-K ids are its K most likely
        top = np.argsort(-lp_t, axis=-1)[..., :K]
        out["teacher_topk_logprob"] = np.take_along_axis(lp_t, top, -1).astype(np.float32)
        out["student_logprob_on_teacher_topk"] = np.take_along_axis(lp_s, top, -1).astype(np.float32)
        obs = rng.integers(0, K + 3, size=(B, width))
        out["teacher_logprob_obs"] = np.take_along_axis(lp_t, obs[..., None], -1)[..., 0].astype(np.float32)
        out["student_logprob_obs"] = np.take_along_axis(lp_s, obs[..., None], -1)[..., 0].astype(np.float32)
        out["obs_in_topk"] = (top == obs[..., None]).any(-1)
        out["credit_mask"] = rng.random((B, width)) < 0.1
        assert out["teacher_topk_logprob"].shape == shape3
    return out


TOKEN_AND_SGCD = ("row_traj_id", "response_mask", "token_turn_idx", "old_logprob", "ref_logprob",
                  "response_len_tokens", "teacher_topk_logprob", "student_logprob_on_teacher_topk",
                  "teacher_logprob_obs", "student_logprob_obs", "obs_in_topk", "credit_mask")


def traj_layout_from_step(batch: TrajectoryBatch, gap: int = 1) -> TrajectoryBatch:
    """The same batch with its step-row token table rewritten as trajectory rows (spec 1.2): each trajectory's
    responses in turn order, ``gap`` masked-out observation tokens between them, every per-token array carried
    along. The turn table is unchanged, so both layouts hold the same tokens of the same turns."""
    d = batch.to_dict()
    mask, tti, rti = d["response_mask"], d["token_turn_idx"], d["row_traj_id"]
    per_tok = [k for k in ("old_logprob", "ref_logprob", "teacher_topk_logprob", "student_logprob_on_teacher_topk",
                           "teacher_logprob_obs", "student_logprob_obs", "obs_in_topk", "credit_mask") if k in d]
    rows = []
    for tid in dict.fromkeys(rti.tolist()):  # trajectories in order of first appearance
        sel = [b for b in np.flatnonzero(rti == tid) if mask[b].any()]
        sel.sort(key=lambda b: int(tti[b][mask[b]][0]))
        pieces = []
        for b in sel:
            cols = np.flatnonzero(mask[b])
            if pieces:
                pieces.append((None, gap))
            pieces.append((b, cols))
        rows.append((tid, pieces))
    width = max([sum(len(c) if b is not None else c for b, c in p) for _, p in rows] + [1])
    out = {"row_traj_id": np.array([t for t, _ in rows]),
           "response_mask": np.zeros((len(rows), width), bool), "token_turn_idx": np.full((len(rows), width), -1)}
    for k in per_tok:
        out[k] = np.zeros((len(rows), width) + d[k].shape[2:], dtype=d[k].dtype)
    for r, (_, pieces) in enumerate(rows):
        pos = 0
        for b, cols in pieces:
            if b is None:
                pos += cols
                continue
            n = len(cols)
            out["response_mask"][r, pos:pos + n] = True
            out["token_turn_idx"][r, pos:pos + n] = tti[b, cols]
            for k in per_tok:
                out[k][r, pos:pos + n] = d[k][b, cols]
            pos += n
    out["response_len_tokens"] = out["response_mask"].sum(1)
    turn_cols = {k: v for k, v in d.items() if k not in TOKEN_AND_SGCD}
    return TrajectoryBatch(**turn_cols, **out)



def token_values_by_turn(batch: TrajectoryBatch, values: np.ndarray) -> np.ndarray:
    """``values`` on the response tokens as rows (traj_id, turn_idx, k-th token of that turn, value), sorted: the
    same array for two layouts that hold the same tokens."""
    m = batch.response_mask
    b, l = np.nonzero(m)  # row-major: positions ascending within each row
    tid = batch.row_traj_id[b]
    turn = batch.token_turn_idx[b, l].astype(np.int64)
    order = np.lexsort((l, turn, tid))
    tid, turn, vals = tid[order], turn[order], np.asarray(values)[b, l][order].astype(np.float64)
    start = np.r_[True, (tid[1:] != tid[:-1]) | (turn[1:] != turn[:-1])]
    first = np.maximum.accumulate(np.where(start, np.arange(tid.size), 0))
    k = np.arange(tid.size) - first
    return np.stack([tid, turn, k, vals], 1)
