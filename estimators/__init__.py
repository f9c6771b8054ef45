"""Advantage estimators and policy losses for RL on multi-turn LLM agents.

The specification is docs/estimators.md; "spec N.M" in this package cites its sections.

Data model (spec section 1)
---------------------------
Every estimator reads one :class:`TrajectoryBatch`:

* the **turn table**, one row per agent turn: ``group_id`` (prompt group), ``task_id``, ``traj_id``, ``turn_idx``
  (0..T-1), ``reward`` (received after the turn), ``done`` (last turn), ``truncated``, ``success``, ``obs_hash``
  (anchor observation digest), ``valid_action``, ``action_key`` / ``action_parsed`` (PACE), ``process_ok``
  (GVPO), ``info_gain`` / ``is_final_answer`` (IGPO, A2TGPO), ``is_gt`` (PVPO) and ``embedding`` (BiGPO);
* the optional **token table** (``row_traj_id``, ``response_mask``, ``token_turn_idx``, ``old_logprob``,
  ``ref_logprob``, ``response_len_tokens``) in either layout (one row per turn, or one row per trajectory), plus
  SGCD's teacher/student arrays.

Construction validates the contract (spec 1.3) and raises :class:`BatchValidationError` naming the column and rows.
Within a group the canonical order is rollout-major: trajectories by first appearance, then ``turn_idx``.

Estimators (``compute_advantage(name, batch, **config) -> AdvantageResult``; ``available()`` lists them)
-----------------------------------------------------------------------------------------------------
=========== ====================================================================================== ===========
name        what                                                                                   spec
=========== ====================================================================================== ===========
grpo        (R - mu) / (sigma + 1e-6) over the group's trajectories                                3.1
dr_grpo     R - mu                                                                                 3.2
rloo        R - mean of the others                                                                 3.3
dapo        GRPO + dynamic-sampling filter on success + optional overlong shaping / filtering      3.4
gigpo       episode term + step term over rows sharing the anchor observation                       4.1
hgpo        step term averaged over history-consistent groups (reference only)                     4.2
bigpo       GiGPO step term on greedy cosine clusters of fingerprints (state side of BiPACE)       4.3
bipace      BiGPO clusters + PACE action-conditioned baselines (q / diff)                          4.4
igpo        information gain pooled per prompt, accumulated                                        4.5
a2tgpo      turn-group normalized IG, variance-rescaled accumulation, adaptive clip scale          4.5
gvpo        R - mu reshaped on failed executions                                                   4.6
pvpo        R - V_hat(task) from a static value table                                              4.7
sgcd        GRPO x per-token weight from a teacher/student support divergence                      4.8
=========== ====================================================================================== ===========

The result (spec 2.6) holds ``turn_adv`` (float32 per turn row), and with a token table ``token_adv``,
``loss_mask``, ``clip_scale`` (A2TGPO), ``token_weight`` (SGCD), plus ``diagnostics``.

BiGPO's eps: ``calibrate_eps=True`` searches it on the given batch (``diagnostics["eps_used"]``); to calibrate once,
at the first training step as the paper does, keep an :class:`EpsCalibrator` (explicit state; the estimators stay
pure functions).

Policy losses (spec section 6) live in :mod:`estimators.losses`, the only module that imports torch (lazily).
This package is a leaf: numpy only, no trainer, no ``agentgym``.
"""

from . import a2tgpo, bipace, gigpo, gvpo, outcome, pvpo, sgcd  # noqa: F401  (fill the registry)
from .a2tgpo import a2tgpo_components, clip_scale_from_ig
from .action_keys import action_keys, action_tag, first_n, parse_action
from .batch import BatchValidationError, MissingColumnError, TrajectoryBatch, digest_strings
from .bipace import (CalibrationResult, EpsCalibrator, HashNgram, calibrate_eps, cluster_groups,
                     greedy_cosine_clusters, pace_advantage)
from .configs import (A2TGPOConfig, BiGPOConfig, BiPACEConfig, ConfigError, DAPOConfig, GiGPOConfig, GVPOConfig,
                      HGPOConfig, IGPOConfig, OutcomeConfig, PVPOConfig, SGCDConfig)
from .gigpo import cluster_diagnostics, hgpo_levels
from .outcome import mixed_groups, overlong_penalty
from .primitives import broadcast_to_tokens, group_labels, group_normalize, return_to_go
from .pvpo import GTTrajectory, StaticValueTable, inject_gt, prerollout_filter, select_gt_injections
from .registry import available, compute_advantage, get_estimator, make_config, register
from .result import AdvantageResult
from .sgcd import segment_scores, sgcd_weights, support_divergence

__all__ = [
    "TrajectoryBatch", "BatchValidationError", "MissingColumnError", "ConfigError",
    "compute_advantage", "available", "register", "get_estimator", "make_config", "AdvantageResult",
    "digest_strings", "OutcomeConfig", "DAPOConfig", "GiGPOConfig", "HGPOConfig", "BiGPOConfig", "BiPACEConfig", "A2TGPOConfig",
    "IGPOConfig", "GVPOConfig", "PVPOConfig", "SGCDConfig",
    "group_normalize", "group_labels", "return_to_go", "broadcast_to_tokens", "mixed_groups", "overlong_penalty",
    "greedy_cosine_clusters", "cluster_groups", "HashNgram", "calibrate_eps", "CalibrationResult", "EpsCalibrator",
    "pace_advantage", "first_n", "action_tag", "action_keys", "parse_action", "cluster_diagnostics",
    "hgpo_levels", "StaticValueTable", "prerollout_filter", "select_gt_injections", "GTTrajectory", "inject_gt",
    "support_divergence", "segment_scores", "sgcd_weights", "a2tgpo_components", "clip_scale_from_ig",
]
