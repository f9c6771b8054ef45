"""Trainer adapters: plug agentgym environments and the :mod:`estimators` into TRL and verl.

Modules (each imports torch / transformers / trl lazily, so ``import adapters`` stays light):

* :mod:`adapters.hooks`: model-side quantities the estimators need (hidden-state fingerprints for BiPACE's
  ``actor_hidden`` embedder, per-turn information gain for IGPO / A2TGPO, teacher/student scores for SGCD) and
  the fingerprint layer calibration of the BiPACE paper's App. H;
* :mod:`adapters.summarizers`: credit-reference summarizers for SGCD (deterministic rule-based, or any
  OpenAI-compatible chat endpoint);
* :mod:`adapters.episodes`: a trainer-agnostic multi-turn player (one token sequence per episode, observation
  tokens masked, turn spans recorded) and the builder of the :class:`estimators.TrajectoryBatch` with its token
  table;
* :mod:`adapters.trl`: the TRL 1.16 ``GRPOTrainer`` subclass (``AgentGymGRPOTrainer``);
* :mod:`adapters.trl_env`: every env as a TRL 1.16 ``environment_factory`` class (TRL's own tool-calling loop);
* :mod:`adapters.train`: ``agentgym train``;
* :mod:`adapters.verl`: the verl 0.9.1 plugin (every estimator as ``agentgym_<name>``, the per-turn metadata
  bridge into ``compute_advantage``, the ``agentgym`` agent loop).
* :mod:`adapters.skyrl`: every env registered with SkyRL-Gym (``skyrl_gym.make``).
"""

__all__: list[str] = []
