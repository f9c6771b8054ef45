"""agentgym's policy loss inside verl 0.9.1: A2TGPO's per-token adaptive clipping and the turn-level ratio.

verl hands a registered policy loss (``core_algos.register_policy_loss``) only ``old_log_prob``, ``log_prob``,
``advantages``, ``response_mask``, ``loss_agg_mode``, ``config`` and ``rollout_is_weights``, so the extra per-token
tensors the bridge writes (:mod:`adapters.verl.bridge`: ``agentgym_clip_scale`` and ``agentgym_token_turn_idx``,
both ``(B, T)``) cannot reach one; nothing is registered there. Instead :func:`agentgym_ppo_loss` replaces the
actor's whole loss function through verl's documented seam ``ActorRolloutRefWorker.set_loss_fn(loss_fn)``
(:func:`install_loss`), the place where verl itself installs ``partial(verl.workers.utils.losses.ppo_loss,
config=actor_config)``.

:func:`agentgym_ppo_loss` has ``ppo_loss``'s contract (inputs, ``(loss, metrics)`` output, entropy and KL terms,
global batch info); its policy-gradient term is :func:`estimators.losses.policy_loss`. Without the extra keys and
with the default ``ratio="token"`` it equals verl's ``ppo_loss`` with ``policy_loss.loss_mode=vanilla``.

Which trainer path delivers the extra keys to the actor (none of this was executed here, there is no Ray / GPU run
in the tests):

* legacy trainer (``trainer.use_v1=false``): ``RayPPOTrainer._update_actor`` sends the whole batch
  (``batch.to_tensordict()``), so the ``(B, T)`` tensors the bridge wrote into ``data.batch`` travel with it; call
  :func:`install_loss` after ``trainer.init_workers()``;
* v1 trainer (the default): ``PPOTrainer._compute_advantage`` writes only ``advantages`` / ``returns`` back to the
  TransferQueue, so the extra keys do not arrive: the loss then runs unscaled (``ratio="token"``) or raises
  (``ratio="turn"``).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["CLIP_SCALE_KEY", "TURN_IDX_KEY", "agentgym_ppo_loss", "make_loss_fn", "install_loss"]

CLIP_SCALE_KEY = "agentgym_clip_scale"
TURN_IDX_KEY = "agentgym_token_turn_idx"
_RATIOS = ("token", "sequence", "turn")
_AGGS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _dual_clip(config: Any, ratio: str, dual_clip: Any) -> float | None:
    if dual_clip == "auto":
        return float(config.get("clip_ratio_c", 3.0)) if ratio == "token" else None
    return None if dual_clip is None else float(dual_clip)


def agentgym_ppo_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None, *, ratio: str = "token",
                      dual_clip: float | str | None = "auto") -> tuple[Any, dict[str, Any]]:
    """verl's ``ppo_loss(config, model_output, data, dp_group=None)`` with agentgym's policy-gradient term.

    * ``data[agentgym_clip_scale]`` (when present) is the per-token clip scale kappa: bounds
      ``[1 - clip_ratio_low * kappa, 1 + clip_ratio_high * kappa]``;
    * ``ratio`` (bound with ``functools.partial``): ``token`` (PPO, verl's vanilla), ``sequence`` (GSPO) or
      ``turn`` (A2TGPO; needs ``data[agentgym_token_turn_idx]``, raises ``ValueError`` without it; the key is
      ignored for the other ratios).

    Mapping of verl's actor config onto :class:`estimators.losses.PolicyLossConfig` (the choices made here):

    * ``clip_low = clip_ratio_low``, ``clip_high = clip_ratio_high`` (each falling back to ``clip_ratio``, as
      verl's vanilla loss does); A2TGPO's recipe uses 3e-3 / 4e-3 with the turn ratio, set them in the actor config;
    * dual clip ``dual_clip="auto"``: ``clip_ratio_c`` for the token ratio (verl's vanilla behaviour), off for the
      sequence / turn ratios (spec 6.2); ``None`` turns it off, a float sets c_dual;
    * ``loss_agg_mode`` -> ``agg`` with verl's global denominators: ``global_token_count = batch_num_tokens /
      dp_size`` and ``global_seq_count = global_batch_size / dp_size`` (verl multiplies the local sum by
      ``dp_size`` and divides by the global count: the same number). ``token-sum`` (absent from
      ``estimators.losses``) is ``token-mean`` with a unit denominator, times ``dp_size``. For
      ``seq-mean-token-sum-norm`` without ``global_batch_size`` the sequence count is verl's (rows with at least
      one response token; ``estimators.losses`` alone counts every row), ``l_norm = loss_scale_factor``, or
      when that is None verl's own default, the padded response width (kept for verl parity; spec 6.4 and
      ``estimators.losses`` want a fixed L_norm, so set ``actor.loss_scale_factor`` to the maximum response
      length for Dr.GRPO);
    * ``rollout_is_weights`` w (non-negative, no gradient) are folded into the advantages: for w >= 0,
      w * max(-A r, -A clip(r)) = max(-(wA) r, -(wA) clip(r)), and the dual clip commutes the same way, so the
      loss equals verl's weighted per-token loss (the clip fractions then count tokens with w = 0 as unclipped);
    * the KL term (``use_kl_loss``, ``kl_loss_type``, ``kl_loss_coef``) and the entropy bonus are verl's own
      (``kl_penalty`` / ``agg_loss``), exactly as in ``ppo_loss``; the recipe's ``kl_coef`` is not used.

    ``policy_loss.loss_mode`` must be ``vanilla`` (this function replaces that loss; other loss modes and
    on-policy distillation are not covered). Returns ``(loss, metrics)`` with ``ppo_loss``'s metric names, plus
    ``actor/agentgym_clip_scale_mean`` when a clip scale was used.
    """
    import torch
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.padding import no_padding_2_padding

    from estimators.losses import PolicyLossConfig, policy_loss

    if ratio not in _RATIOS:
        raise ValueError(f"ratio={ratio!r} is not one of {_RATIOS}")
    loss_mode = config.policy_loss.get("loss_mode", "vanilla")
    if loss_mode != "vanilla":
        raise ValueError(f"agentgym_ppo_loss replaces verl's 'vanilla' policy loss, got loss_mode={loss_mode!r}; "
                         "choose the ratio with agentgym_ppo_loss(ratio=...) instead")
    loss_agg_mode = config.loss_agg_mode
    if loss_agg_mode not in _AGGS:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")

    # --- as in verl.workers.utils.losses.ppo_loss ---
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)
    config.global_batch_info["dp_size"] = data["dp_size"]
    config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]
    config.global_batch_info["global_batch_size"] = data["global_batch_size"]
    config.global_batch_info["loss_scale_factor"] = config.loss_scale_factor
    if (data["dp_size"] > 1 or data["batch_num_tokens"] is not None or data["global_batch_size"] is not None
            or config.loss_scale_factor is not None):
        metric_aggregation = AggregationType.SUM
    else:
        metric_aggregation = AggregationType.MEAN

    fields = ["response_mask", "old_log_probs", "advantages"]
    for key in ("rollout_is_weights", "ref_log_prob", CLIP_SCALE_KEY, TURN_IDX_KEY):
        if key in data:
            fields.append(key)
    padded = data.select(*fields).to_padded_tensor()
    response_mask = padded["response_mask"].to(bool)
    old_log_prob = padded["old_log_probs"]
    advantages = padded["advantages"]
    rollout_is_weights = padded.get("rollout_is_weights", None)
    clip_scale = padded.get(CLIP_SCALE_KEY, None)
    token_turn_idx = None
    if ratio == "turn":
        if TURN_IDX_KEY not in padded:
            raise ValueError(f"ratio='turn' needs data[{TURN_IDX_KEY!r}] (written by the agentgym bridge from the "
                             "agent loop's agentgym_token_turn; the v1 trainer does not forward it)")
        token_turn_idx = padded[TURN_IDX_KEY].long()

    # --- the policy-gradient term: estimators.losses.policy_loss ---
    gbi = config.global_batch_info
    dp = int(gbi["dp_size"] or 1)
    n_tok, n_seq = gbi["batch_num_tokens"], gbi["global_batch_size"]
    if dp > 1 and ((loss_agg_mode == "token-mean" and n_tok is None)
                   or (loss_agg_mode.startswith("seq-") and n_seq is None)):
        raise ValueError(f"global batch info (batch_num_tokens / global_batch_size) is required for "
                         f"loss_agg_mode={loss_agg_mode!r} when dp_size > 1")
    agg = "token-mean" if loss_agg_mode == "token-sum" else loss_agg_mode
    global_token_count = 1.0 if loss_agg_mode == "token-sum" else (None if n_tok is None else n_tok / dp)
    global_seq_count = None if n_seq is None else n_seq / dp
    if loss_agg_mode == "seq-mean-token-sum-norm" and global_seq_count is None:
        global_seq_count = float((response_mask.sum(-1) > 0).sum().item())
    cfg = PolicyLossConfig(ratio=ratio,
                           clip_low=config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio,
                           clip_high=(config.clip_ratio_high if config.clip_ratio_high is not None
                                      else config.clip_ratio),
                           dual_clip=_dual_clip(config, ratio, dual_clip), dual_clip_auto=False, agg=agg, kl_coef=0.0,
                           l_norm=(config.loss_scale_factor if config.loss_scale_factor is not None
                                   else response_mask.shape[-1]))
    adv = advantages if rollout_is_weights is None else advantages * rollout_is_weights.detach()
    pg_loss, pm = policy_loss(log_prob, old_log_prob, adv, response_mask, cfg, clip_scale=clip_scale,
                              token_turn_idx=token_turn_idx, global_token_count=global_token_count,
                              global_seq_count=global_seq_count)
    if loss_agg_mode == "token-sum":
        pg_loss = pg_loss * dp

    pg_metrics = {"actor/pg_clipfrac": pm["clipfrac"], "actor/ppo_kl": pm["ppo_kl"],
                  "actor/pg_clipfrac_lower": pm["clipfrac_lower"]}
    if clip_scale is not None:
        m = response_mask.to(clip_scale.dtype)
        pg_metrics["actor/agentgym_clip_scale_mean"] = float((clip_scale * m).sum() / m.sum().clamp(min=1.0))
    metrics: dict[str, Any] = dict(Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN))
    metrics["actor/pg_loss"] = Metric(value=pg_loss, aggregation=metric_aggregation)
    total = pg_loss

    # --- entropy and KL: as in ppo_loss ---
    if entropy is not None:
        entropy_loss = agg_loss(loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                                **config.global_batch_info)
        total = total - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=metric_aggregation)
    if config.use_kl_loss:
        kld = kl_penalty(logprob=log_prob, ref_logprob=padded["ref_log_prob"], kl_penalty=config.kl_loss_type)
        kl_loss = agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                           **config.global_batch_info)
        total = total + kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=metric_aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
    return total, metrics


def _actor_config(actor_config: Any) -> Any:
    """The actor config as verl's worker builds it: an OmegaConf section (``config.actor_rollout_ref.actor``) goes
    through ``omega_conf_to_dataclass``; a dataclass (``ActorConfig``) is used as is."""
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover
        return actor_config
    if OmegaConf.is_config(actor_config):
        from verl.utils.config import omega_conf_to_dataclass

        return omega_conf_to_dataclass(actor_config)
    return actor_config


def make_loss_fn(actor_config: Any, *, ratio: str = "token", dual_clip: float | str | None = "auto"):
    """``functools.partial(agentgym_ppo_loss, config=..., ratio=..., dual_clip=...)``: a loss function with the
    ``(model_output, data, dp_group=None)`` signature verl's engines call (picklable: a module-level function
    and plain settings)."""
    if ratio not in _RATIOS:
        raise ValueError(f"ratio={ratio!r} is not one of {_RATIOS}")
    return functools.partial(agentgym_ppo_loss, config=_actor_config(actor_config), ratio=ratio, dual_clip=dual_clip)


def install_loss(worker_or_wg: Any, actor_config: Any, *, ratio: str = "token",
                 dual_clip: float | str | None = "auto"):
    """Install :func:`agentgym_ppo_loss` as the actor's loss: ``worker_or_wg.set_loss_fn(make_loss_fn(...))``.

    ``worker_or_wg`` is the actor worker group (``trainer.actor_rollout_wg``; ``set_loss_fn`` is dispatched
    ONE_TO_ALL to every rank) or a worker. Call it after the workers are initialised, because the worker installs
    verl's own ``ppo_loss`` in ``init_model``: after ``trainer.init_workers()`` (legacy trainer) or in a trainer
    subclass's ``init()`` after ``super().init()`` (v1; see the module docstring for which keys arrive there).
    ``actor_config``: ``trainer.config.actor_rollout_ref.actor``. Returns the installed function. The adapter's
    tests exercise this with a stand-in object; a live Ray worker group was not run.
    """
    fn = make_loss_fn(actor_config, ratio=ratio, dual_clip=dual_clip)
    worker_or_wg.set_loss_fn(fn)
    return fn
