"""`TrajectoryBatch`: the turn table and the optional token table (spec sections 1.1 to 1.3).

Every estimator reads one :class:`TrajectoryBatch`. The constructor takes keyword arguments whose names are the
spec's column names, each an equal-length numpy array (the token arrays share a ``[B, L]`` shape), coerces them to
the spec's dtypes, and validates them (spec 1.3). A failed check raises :class:`BatchValidationError`, whose
message and ``column`` / ``rows`` attributes name the column and the offending rows.

Derived quantities (dense trajectory and group indices in order of first appearance, the canonical rollout-major
order, trajectory lengths and returns, the token -> turn-row map) are computed once during validation and cached.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Iterable

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "BatchValidationError",
    "MissingColumnError",
    "TrajectoryBatch",
    "TURN_COLUMNS",
    "TOKEN_COLUMNS",
    "SGCD_COLUMNS",
]


class BatchValidationError(ValueError):
    """A column of a :class:`TrajectoryBatch` breaks the data contract of spec section 1.

    Attributes: ``column`` (the column at fault) and ``rows`` (turn-table row indices, or token-table row indices
    for token columns; may be empty).
    """

    def __init__(self, column: str, message: str, rows: Iterable[int] | None = None):
        self.column = column
        self.rows = np.asarray(list(rows) if rows is not None else [], dtype=np.int64)
        text = f"column {column!r}: {message}"
        if self.rows.size:
            shown = ", ".join(str(int(r)) for r in self.rows[:10])
            more = f", ... ({self.rows.size} rows in all)" if self.rows.size > 10 else ""
            text += f" (rows [{shown}{more}])"
        super().__init__(text)


class MissingColumnError(BatchValidationError):
    """An estimator needs a column the batch does not have (raised before anything is computed)."""

    def __init__(self, column: str, estimator: str):
        super().__init__(column, f"required by estimator {estimator!r} but missing from the batch")
        self.estimator = estimator


# column name -> numpy dtype (None: int64 or str, decided by the data)
TURN_COLUMNS: dict[str, Any] = {
    "group_id": np.int64,
    "task_id": None,
    "traj_id": np.int64,
    "turn_idx": np.int32,
    "reward": np.float32,
    "done": np.bool_,
    "truncated": np.bool_,
    "success": np.float32,
    "obs_hash": np.int64,
    "valid_action": np.bool_,
    "action_key": np.int64,
    "action_parsed": np.bool_,
    "process_ok": np.int8,
    "info_gain": np.float32,
    "is_final_answer": np.bool_,
    "is_gt": np.bool_,
    "embedding": np.float32,
}
REQUIRED_TURN_COLUMNS = ("group_id", "traj_id", "turn_idx", "reward", "done")

TOKEN_COLUMNS: dict[str, Any] = {
    "row_traj_id": np.int64,
    "response_mask": np.bool_,
    "token_turn_idx": np.int32,
    "old_logprob": np.float32,
    "ref_logprob": np.float32,
    "response_len_tokens": np.int64,
}

SGCD_COLUMNS: dict[str, Any] = {
    "teacher_topk_logprob": np.float32,
    "student_logprob_on_teacher_topk": np.float32,
    "teacher_logprob_obs": np.float32,
    "student_logprob_obs": np.float32,
    "obs_in_topk": np.bool_,
    "credit_mask": np.bool_,
}

_ALL_COLUMNS = {**TURN_COLUMNS, **TOKEN_COLUMNS, **SGCD_COLUMNS}


def _coerce_int(name: str, value: Any, dtype: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == np.uint64:
        # 64-bit digests handed over unsigned: keep the bits (only equality matters for hashes)
        return arr.view(np.int64)
    if arr.dtype.kind == "b":
        return arr.astype(dtype)
    if arr.dtype.kind == "f":
        if arr.size and not np.all(np.isfinite(arr)):
            raise BatchValidationError(name, "non-finite value in an integer column", np.flatnonzero(~np.isfinite(arr)))
        if arr.size and not np.all(arr == np.round(arr)):
            raise BatchValidationError(name, "non-integer value in an integer column",
                                       np.flatnonzero(arr != np.round(arr)))
        return arr.astype(dtype)
    if arr.dtype.kind not in "iu":
        raise BatchValidationError(name, f"expected integers, got dtype {arr.dtype}")
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        bad = np.flatnonzero((arr < info.min) | (arr > info.max))
        raise BatchValidationError(name, f"value out of range for {np.dtype(dtype).name}", bad)
    return arr.astype(dtype, copy=False)


def digest_strings(values: Any, namespace: str = "obs-text") -> np.ndarray:
    """Stable non-negative int64 digests (BLAKE2b-64, personalised with ``namespace``, top bit cleared) of the
    exact UTF-8 text of each string, equal for equal text in any process. Each *distinct* string is digested
    once (a batch repeats observations: that is what GiGPO's anchor states are), so the cost is one dict lookup per
    row plus one digest per distinct string. No normalisation: verl-agent groups anchor observations by exact
    text, and so does this."""
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    person = namespace.encode()[:16]
    index = dict.fromkeys(items)  # the distinct strings, found at C speed
    distinct = list(index)
    for i, s in enumerate(distinct):
        if type(s) is not str:
            raise BatchValidationError("obs_hash", f"mixed column: {type(s).__name__} among strings",
                                       [items.index(s)])
        index[s] = i
    raw = b"".join([hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8, person=person).digest()
                    for s in distinct])
    digests = (np.frombuffer(raw, dtype="<u8") >> np.uint64(1)).astype(np.int64)
    return digests[np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items))]


def _holds_strings(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "US" or (value.dtype.kind == "O" and value.size > 0
                                            and isinstance(value.flat[0], str))
    if isinstance(value, (list, tuple)):
        return len(value) > 0 and isinstance(value[0], str)
    return False


def _coerce(name: str, value: Any) -> np.ndarray:
    dtype = _ALL_COLUMNS[name]
    if name == "obs_hash" and _holds_strings(value):
        # raw observation strings (verl-agent's ``anchor_obs``): digested once per distinct string
        return digest_strings(np.asarray(value, dtype=object).reshape(-1))
    if name == "task_id":
        arr = np.asarray(value)
        if arr.dtype.kind in "iub":
            return arr.astype(np.int64)
        if arr.dtype.kind == "O" and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                         for v in arr.tolist()):
            return arr.astype(np.int64)  # ints handed over in an object array stay ints
        if arr.dtype.kind in "USO":
            return arr.astype(str)
        if arr.dtype.kind == "f":
            return _coerce_int(name, arr, np.int64)
        raise BatchValidationError(name, f"expected int64 or str, got dtype {arr.dtype}")
    if dtype is np.bool_:
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and arr.size and not np.all(np.isin(arr, (0.0, 1.0))):
            raise BatchValidationError(name, "boolean column holds values other than 0/1",
                                       np.flatnonzero(~np.isin(arr, (0.0, 1.0))))
        if arr.dtype.kind in "iu" and arr.size and not np.all((arr == 0) | (arr == 1)):
            raise BatchValidationError(name, "boolean column holds values other than 0/1",
                                       np.flatnonzero((arr != 0) & (arr != 1)))
        return arr.astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return _coerce_int(name, value, dtype)
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiub":
        raise BatchValidationError(name, f"expected numbers, got dtype {arr.dtype}")
    return arr.astype(dtype, copy=False)


def _bad_rows_of_trajs(traj_index: np.ndarray, bad_trajs: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.isin(traj_index, bad_trajs))


def _dense_first_appearance(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense labels 0..U-1 numbered in order of first appearance; returns (labels, unique values in that order)."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), values[:0]
    uniq, first, inv = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv.reshape(-1)].astype(np.int64), uniq[order]


class TrajectoryBatch:
    """Turn table (spec 1.1) plus an optional token table (spec 1.2) and SGCD arrays.

    All arguments are keyword-only and named exactly as the spec's columns. ``group_id``, ``traj_id``,
    ``turn_idx``, ``reward`` and ``done`` are required; every other column defaults to ``None`` (absent). An
    estimator that needs an absent column raises :class:`MissingColumnError` before computing.

    Turn columns are 1-D arrays of length ``N_turn`` (``embedding``: ``[N_turn, D]``, L2-normalized on input).
    Token columns are ``[B, L]`` arrays (``row_traj_id`` and ``response_len_tokens``: ``[B]``; SGCD's top-K
    arrays: ``[B, L, K]``). ``validate=False`` skips the contract checks of spec 1.3 (the derived indices are
    still computed); use it only on data you built yourself.

    ``obs_hash`` takes int64 digests (agentgym's ``info["obs_hash"]``) or the raw anchor observation strings, as
    verl-agent's ``anchor_obs`` holds them: strings are digested once per distinct string
    (:func:`digest_strings`, exact text), so equal observations share a digest in any batch and process.
    """

    def __init__(
        self,
        *,
        group_id: Any,
        traj_id: Any,
        turn_idx: Any,
        reward: Any,
        done: Any,
        task_id: Any = None,
        truncated: Any = None,
        success: Any = None,
        obs_hash: Any = None,
        valid_action: Any = None,
        action_key: Any = None,
        action_parsed: Any = None,
        process_ok: Any = None,
        info_gain: Any = None,
        is_final_answer: Any = None,
        is_gt: Any = None,
        embedding: Any = None,
        row_traj_id: Any = None,
        response_mask: Any = None,
        token_turn_idx: Any = None,
        old_logprob: Any = None,
        ref_logprob: Any = None,
        response_len_tokens: Any = None,
        teacher_topk_logprob: Any = None,
        student_logprob_on_teacher_topk: Any = None,
        teacher_logprob_obs: Any = None,
        student_logprob_obs: Any = None,
        obs_in_topk: Any = None,
        credit_mask: Any = None,
        validate: bool = True,
    ) -> None:
        given = dict(
            group_id=group_id, task_id=task_id, traj_id=traj_id, turn_idx=turn_idx, reward=reward, done=done,
            truncated=truncated, success=success, obs_hash=obs_hash, valid_action=valid_action,
            action_key=action_key, action_parsed=action_parsed, process_ok=process_ok, info_gain=info_gain,
            is_final_answer=is_final_answer, is_gt=is_gt, embedding=embedding, row_traj_id=row_traj_id,
            response_mask=response_mask, token_turn_idx=token_turn_idx, old_logprob=old_logprob,
            ref_logprob=ref_logprob, response_len_tokens=response_len_tokens,
            teacher_topk_logprob=teacher_topk_logprob,
            student_logprob_on_teacher_topk=student_logprob_on_teacher_topk,
            teacher_logprob_obs=teacher_logprob_obs, student_logprob_obs=student_logprob_obs,
            obs_in_topk=obs_in_topk, credit_mask=credit_mask,
        )
        self._data: dict[str, np.ndarray | None] = {}
        for name, value in given.items():
            self._data[name] = None if value is None else _coerce(name, value)
        self._validated = validate
        self._check_shapes()
        self._derive(validate)
        if validate:
            self._validate_turns()
        # Normalized in place only when the array is certainly the constructor's own copy (a list, or an ndarray it
        # had to convert): a float32 tensor, np.matrix or memmap is wrapped, not copied, and the caller's memory
        # must never change.
        coerced = self._data["embedding"]
        owned = embedding is not None and (isinstance(embedding, (list, tuple)) or (
            isinstance(embedding, np.ndarray) and not np.may_share_memory(coerced, embedding)))
        self._normalize_embedding(owned=owned)
        self._derive_tokens(validate)

    # ------------------------------------------------------------------ column access
    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("_data")
        if data is not None and name in data:
            return data[name]
        raise AttributeError(name)

    def has(self, name: str) -> bool:
        """True when the column ``name`` was given."""
        return self._data.get(name) is not None

    def require(self, names: Iterable[str], estimator: str) -> None:
        """Raise :class:`MissingColumnError` naming the first column of ``names`` that is absent."""
        for name in names:
            if self._data.get(name) is None:
                raise MissingColumnError(name, estimator)

    @classmethod
    def column_names(cls) -> tuple[str, ...]:
        """Every column name the constructor accepts (turn, token, SGCD), in spec order."""
        return tuple(_ALL_COLUMNS)

    def columns(self) -> tuple[str, ...]:
        """The names of the columns present in this batch, in spec order."""
        return tuple(k for k in _ALL_COLUMNS if self._data.get(k) is not None)

    def to_dict(self) -> dict[str, np.ndarray]:
        """The present columns as a dict (the arrays themselves, not copies)."""
        return {k: self._data[k] for k in self.columns()}  # type: ignore[misc]

    def replace(self, **changes: Any) -> "TrajectoryBatch":
        """A new, re-validated batch with some columns replaced (``None`` removes an optional column)."""
        kwargs: dict[str, Any] = dict(self._data)
        kwargs.update(changes)
        return TrajectoryBatch(**kwargs, validate=True)

    def __len__(self) -> int:
        return self.n_turns

    def __repr__(self) -> str:
        tok = f", tokens={self.response_mask.shape}" if self.has_tokens else ""
        return (f"TrajectoryBatch(n_turns={self.n_turns}, n_trajectories={self.n_trajectories}, "
                f"n_groups={self.n_groups}{tok}, columns={list(self.columns())})")

    @property
    def has_tokens(self) -> bool:
        return self._data.get("response_mask") is not None

    # ------------------------------------------------------------------ checks
    def _check_shapes(self) -> None:
        d = self._data
        n = d["group_id"].shape[0] if d["group_id"].ndim == 1 else -1
        for name in TURN_COLUMNS:
            arr = d[name]
            if arr is None:
                continue
            if name == "embedding":
                if arr.ndim != 2 or arr.shape[0] != n:
                    raise BatchValidationError(name, f"expected shape [N_turn={n}, D], got {arr.shape}")
                continue
            if arr.ndim != 1:
                raise BatchValidationError(name, f"expected a 1-D array, got shape {arr.shape}")
            if arr.shape[0] != n:
                raise BatchValidationError(name, f"length {arr.shape[0]} differs from group_id's length {n}")
        tok = {k: d[k] for k in list(TOKEN_COLUMNS) + list(SGCD_COLUMNS) if d[k] is not None}
        if not tok:
            return
        for need in ("row_traj_id", "response_mask", "token_turn_idx"):
            if d[need] is None:
                raise BatchValidationError(need, "token arrays were given but this one is missing")
        if d["response_mask"].ndim != 2:
            raise BatchValidationError("response_mask", f"expected [B, L], got shape {d['response_mask'].shape}")
        b, length = d["response_mask"].shape
        for name, arr in tok.items():
            if name in ("row_traj_id", "response_len_tokens"):
                want: tuple[int, ...] = (b,)
            elif name in ("teacher_topk_logprob", "student_logprob_on_teacher_topk"):
                if arr.ndim != 3 or arr.shape[:2] != (b, length):
                    raise BatchValidationError(name, f"expected [B={b}, L={length}, K], got {arr.shape}")
                continue
            else:
                want = (b, length)
            if arr.shape != want:
                raise BatchValidationError(name, f"expected shape {list(want)}, got {list(arr.shape)}")
        if (d["teacher_topk_logprob"] is None) != (d["student_logprob_on_teacher_topk"] is None):
            raise BatchValidationError("student_logprob_on_teacher_topk",
                                       "teacher_topk_logprob and student_logprob_on_teacher_topk go together")
        if (d["teacher_topk_logprob"] is not None
                and d["teacher_topk_logprob"].shape != d["student_logprob_on_teacher_topk"].shape):
            raise BatchValidationError("student_logprob_on_teacher_topk", "shape differs from teacher_topk_logprob")

    def _derive(self, validate: bool) -> None:
        d = self._data
        traj = d["traj_id"]
        self.n_turns = int(traj.shape[0])
        self.traj_index, self.traj_ids = _dense_first_appearance(traj)
        self.group_index, self.group_ids = _dense_first_appearance(d["group_id"])
        self.n_trajectories = int(self.traj_ids.shape[0])
        self.n_groups = int(self.group_ids.shape[0])
        turn = d["turn_idx"].astype(np.int64)
        # canonical order: group (first appearance), trajectory (first appearance), turn_idx
        order = np.lexsort((turn, self.traj_index, self.group_index))
        if validate and self.n_turns:
            # a trajectory in two groups breaks contiguity; check on the traj-sorted order
            torder = np.lexsort((turn, self.traj_index))
            g_sorted = self.group_index[torder]
            t_sorted = self.traj_index[torder]
            same = t_sorted[1:] == t_sorted[:-1]
            bad = same & (g_sorted[1:] != g_sorted[:-1])
            if bad.any():
                bad_trajs = np.unique(t_sorted[1:][bad])
                raise BatchValidationError(
                    "group_id", f"trajectory traj_id={self.traj_ids[bad_trajs[0]]} lies in more than one group "
                    f"({bad_trajs.size} such trajectories)", _bad_rows_of_trajs(self.traj_index, bad_trajs))
        self.canonical_order = order
        self.traj_len = np.bincount(self.traj_index, minlength=self.n_trajectories).astype(np.int64)
        self.traj_start = np.zeros(self.n_trajectories, dtype=np.int64)  # start of each traj in canonical order
        if self.n_trajectories:
            t_in_order = self.traj_index[order]
            starts = np.flatnonzero(np.r_[True, t_in_order[1:] != t_in_order[:-1]])
            self.traj_start[t_in_order[starts]] = starts
        self.traj_group = np.zeros(self.n_trajectories, dtype=np.int64)
        self.traj_group[self.traj_index] = self.group_index
        self.group_n_traj = np.bincount(self.traj_group, minlength=self.n_groups).astype(np.int64)
        # R(tau) = sum of rewards (float64)
        self.traj_return = np.bincount(self.traj_index, weights=d["reward"].astype(np.float64),
                                       minlength=self.n_trajectories)
        # canonical position of each row
        self.canonical_pos = np.empty(self.n_turns, dtype=np.int64)
        self.canonical_pos[order] = np.arange(self.n_turns)
        # last row of each trajectory (the done row once validated)
        self.traj_last_row = order[self.traj_start + self.traj_len - 1] if self.n_trajectories else \
            np.zeros(0, dtype=np.int64)

    def _validate_turns(self) -> None:
        d = self._data
        n = self.n_turns
        order = self.canonical_order
        turn = d["turn_idx"].astype(np.int64)
        # finite numeric columns
        for name in ("reward", "success"):
            arr = d[name]
            if arr is not None and not np.all(np.isfinite(arr)):
                raise BatchValidationError(name, "non-finite value (NaN or inf)", np.flatnonzero(~np.isfinite(arr)))
        if d["info_gain"] is not None and np.isinf(d["info_gain"]).any():
            raise BatchValidationError("info_gain", "infinite value (NaN is allowed only on final turns)",
                                       np.flatnonzero(np.isinf(d["info_gain"])))
        if n == 0:
            return
        # turn_idx runs 0..T-1 without gaps or repeats
        expected = np.arange(n) - self.traj_start[self.traj_index[order]]
        bad = turn[order] != expected
        if bad.any():
            bad_trajs = np.unique(self.traj_index[order][bad])
            raise BatchValidationError(
                "turn_idx", f"turn indices of trajectory traj_id={self.traj_ids[bad_trajs[0]]} do not run 0..T-1 "
                f"without gaps or repeats ({bad_trajs.size} such trajectories)",
                _bad_rows_of_trajs(self.traj_index, bad_trajs))
        # done exactly once per trajectory, on its last turn
        done = d["done"]
        n_done = np.bincount(self.traj_index, weights=done.astype(np.float64), minlength=self.n_trajectories)
        if (n_done == 0).any():
            bad_trajs = np.flatnonzero(n_done == 0)
            raise BatchValidationError("done", f"trajectory traj_id={self.traj_ids[bad_trajs[0]]} has no row with "
                                       f"done=True ({bad_trajs.size} such trajectories)",
                                       _bad_rows_of_trajs(self.traj_index, bad_trajs))
        if (n_done > 1).any():
            bad_trajs = np.flatnonzero(n_done > 1)
            raise BatchValidationError("done", f"done=True is repeated in trajectory traj_id="
                                       f"{self.traj_ids[bad_trajs[0]]} ({bad_trajs.size} such trajectories)",
                                       _bad_rows_of_trajs(self.traj_index, bad_trajs))
        if not done[self.traj_last_row].all():
            bad_trajs = np.flatnonzero(~done[self.traj_last_row])
            raise BatchValidationError("done", f"done=True is not on the last turn of trajectory traj_id="
                                       f"{self.traj_ids[bad_trajs[0]]}", _bad_rows_of_trajs(self.traj_index,
                                                                                           bad_trajs))
        if d["truncated"] is not None and (d["truncated"] & ~done).any():
            raise BatchValidationError("truncated", "truncated=True on a row that is not the trajectory's last "
                                       "turn (truncated is set on the last turn only)",
                                       np.flatnonzero(d["truncated"] & ~done))
        # per-trajectory constants
        for name in ("success", "task_id", "is_gt"):
            arr = d[name]
            if arr is None:
                continue
            first = arr[self.traj_last_row][self.traj_index]
            bad = arr != first
            if np.any(bad):
                raise BatchValidationError(name, "value differs between turns of one trajectory (it is a "
                                           "trajectory-level column, repeated on every turn)", np.flatnonzero(bad))
        if d["success"] is not None and ((d["success"] < 0) | (d["success"] > 1)).any():
            s = d["success"]
            raise BatchValidationError("success", "value outside [0, 1]", np.flatnonzero((s < 0) | (s > 1)))
        if d["process_ok"] is not None and not np.isin(d["process_ok"], (-1, 0, 1)).all():
            raise BatchValidationError("process_ok", "values must be 1 (ok), 0 (error) or -1 (no execution)",
                                       np.flatnonzero(~np.isin(d["process_ok"], (-1, 0, 1))))
        for name in ("obs_hash", "action_key"):
            arr = d[name]
            if arr is not None and (arr < 0).any():
                logger.debug("column %s holds negative digests; only equality is used", name)

    def _normalize_embedding(self, owned: bool) -> None:
        """L2-normalize the fingerprint rows in float32 (spec 1.1) and check that each row can be normalized.

        The squared norms come from one float32 ``einsum`` pass and the rows are scaled in one float32 multiply:
        at the paper's setting ([2560, 3584]) a float64 copy of the matrix cost more than the clustering itself.
        The float32 norms are accurate to about 1e-6 relative; the clustering rescales every record to unit norm in
        float64 anyway (:func:`estimators.bipace.greedy_cosine_clusters`). Rows whose float32 squared norm is
        zero, non-finite or outside [1e-30, 1e30] (float32 under/overflow) are redone in float64, and a row whose
        float64 norm is still zero or non-finite (a zero vector, NaN or inf) raises. ``owned``: the array is a copy
        made by the constructor, scaled in place; otherwise the caller's array is left untouched.
        """
        emb = self._data["embedding"]
        if emb is None:
            return
        n2 = np.einsum("ij,ij->i", emb, emb)
        slow = ~((n2 > 1e-30) & (n2 < 1e30))  # NaN fails both tests
        norms = np.sqrt(n2, dtype=np.float64)
        if slow.any():
            rows = np.flatnonzero(slow)
            x64 = emb[rows].astype(np.float64)
            norms[rows] = np.sqrt(np.einsum("ij,ij->i", x64, x64))
            # checked even with validate=False: a zero row cannot be normalized
            bad = ~np.isfinite(norms) | (norms <= 0)
            if bad.any():
                raise BatchValidationError("embedding", "zero or non-finite embedding norm (rows must be "
                                           "L2-normalizable)", np.flatnonzero(bad))
        scale = np.zeros(norms.shape, dtype=np.float32)
        np.divide(1.0, norms, out=scale, where=~slow, casting="same_kind")
        out = emb if owned else np.empty_like(emb)
        np.multiply(emb, scale[:, None], out=out)
        if slow.any():
            out[rows] = (x64 / norms[rows, None]).astype(np.float32)
        self.embedding_norm_min = float(norms.min()) if norms.size else 0.0
        self._data["embedding"] = out

    def _derive_tokens(self, validate: bool) -> None:
        d = self._data
        if d["response_mask"] is None:
            self.row_traj_index = None
            self.token_row = None
            return
        mask = d["response_mask"]
        tti = d["token_turn_idx"].astype(np.int64)
        rti = d["row_traj_id"]
        pos = np.searchsorted(self.traj_ids_sorted, rti) if self.n_trajectories else np.zeros_like(rti)
        pos = np.clip(pos, 0, max(self.n_trajectories - 1, 0))
        ok = (self.traj_ids_sorted[pos] == rti) if self.n_trajectories else np.zeros(rti.shape, bool)
        if not ok.all():
            raise BatchValidationError("row_traj_id", "token row names a trajectory that is not in the turn table",
                                       np.flatnonzero(~ok))
        row_traj = self.traj_sorted_to_dense[pos]
        self.row_traj_index = row_traj
        if validate:
            for name in ("old_logprob", "ref_logprob", "teacher_logprob_obs", "student_logprob_obs"):
                arr = d[name]
                if arr is not None and not np.isfinite(arr[mask]).all():
                    raise BatchValidationError(name, "non-finite value on a response token",
                                               np.unique(np.nonzero(mask & ~np.isfinite(arr))[0]))
            for name in ("teacher_topk_logprob", "student_logprob_on_teacher_topk"):
                arr = d[name]
                if arr is not None and not np.isfinite(arr[mask]).all():
                    raise BatchValidationError(name, "non-finite value on a response token",
                                               np.unique(np.nonzero(mask[..., None] & ~np.isfinite(arr))[0]))
        # token -> turn row
        tlen = self.traj_len[row_traj][:, None]
        bad = mask & ((tti < 0) | (tti >= tlen))
        if bad.any():
            raise BatchValidationError("token_turn_idx", "a response token's turn index names no turn of its "
                                       "trajectory", np.unique(np.nonzero(bad)[0]))
        canon = self.traj_start[row_traj][:, None] + np.where(mask, tti, 0)
        token_row = self.canonical_order[canon]
        self.token_row = np.where(mask, token_row, -1)

    @property
    def traj_ids_sorted(self) -> np.ndarray:
        if not hasattr(self, "_traj_sorted"):
            o = np.argsort(self.traj_ids, kind="stable")
            self._traj_sorted = self.traj_ids[o]
            self._traj_sorted_dense = o.astype(np.int64)
        return self._traj_sorted

    @property
    def traj_sorted_to_dense(self) -> np.ndarray:
        self.traj_ids_sorted  # noqa: B018 - fills the cache
        return self._traj_sorted_dense

    # ------------------------------------------------------------------ derived helpers
    def row_of(self, traj_dense: np.ndarray, turn: np.ndarray) -> np.ndarray:
        """Turn-table row of (dense trajectory index, turn_idx)."""
        return self.canonical_order[self.traj_start[traj_dense] + turn]

    def traj_value(self, name: str) -> np.ndarray:
        """A trajectory-level column (repeated on every turn), one value per trajectory (dense order)."""
        return self._data[name][self.traj_last_row]  # type: ignore[index]
