"""verl adapter (pinned: ``verl==0.9.1``; see docs/trainers.md section 3).

* :mod:`adapters.verl.bridge`: every agentgym estimator as a verl advantage estimator (``agentgym_<name>``), the
  builder of an :class:`estimators.TrajectoryBatch` from a verl batch, and the metadata bridge: verl 0.9.1 passes
  a custom estimator only ``token_level_rewards``, ``response_mask``, ``index`` and ``config`` (``non_tensor_batch``
  only to ``gdpo``), so the bridge wraps ``ray_trainer.compute_advantage`` (and the v1 trainer's import of it) to
  hand ``agentgym_*`` estimators the per-turn metadata the agent loop stored (estimators that need a model-side
  column the agent loop cannot supply -- actor-hidden fingerprints, information gain, SGCD scores -- fail with an
  error naming the alternatives);
* :mod:`adapters.verl.agent_loop`: ``AgentGymAgentLoop`` (registered as agent loop ``agentgym``), which plays an
  agentgym env multi-turn against verl's rollout server and stores per-turn metadata in ``extra_fields``;
* :mod:`adapters.verl.losses`: ``agentgym_ppo_loss``, verl's ``ppo_loss`` contract computed by
  :func:`estimators.losses.policy_loss`, reading A2TGPO's per-token clip scale and turn index from the batch
  (installed with ``install_loss`` through ``set_loss_fn``: a registered policy loss never sees extra tensors);
* :mod:`adapters.verl.plugin`: imported by verl on ``import verl`` (entry point group ``verl.plugins``, or
  ``VERL_USE_EXTERNAL_MODULES=adapters.verl.plugin``); registers the estimators, the agent loop and the bridge.

Nothing here imports verl until a submodule is imported.
"""

__all__: list[str] = []
