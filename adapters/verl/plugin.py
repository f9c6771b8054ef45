"""verl plugin: ``import verl`` imports this module (entry point group ``verl.plugins``, name ``agentgym``, or
``VERL_USE_EXTERNAL_MODULES=adapters.verl.plugin``). It registers

* every agentgym estimator as verl advantage estimator ``agentgym_<name>`` (``algorithm.adv_estimator=
  agentgym_bipace``; settings under ``algorithm.agentgym.<name>``);
* the agent loop ``agentgym`` (:class:`adapters.verl.agent_loop.AgentGymAgentLoop`), when verl-core is installed;
* the metadata bridge (:func:`adapters.verl.bridge.install_bridge`).

The actor loss with A2TGPO's per-token clip scale and turn-level ratio (:mod:`adapters.verl.losses`) is not
registered as a verl policy loss: a registered policy loss never receives the extra per-token tensors, so it is
installed on the actor worker group with :func:`adapters.verl.losses.install_loss` instead.

Registration is idempotent (verl raises on a second registration of a *different* function under one name, so the
functions are created once per process). verl swallows plugin import errors at DEBUG level, so this module logs
an INFO marker and sets :data:`REGISTERED`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

SUPPORTED_VERL = "0.9.1"
REGISTERED: list[str] = []
AGENT_LOOP = False
BRIDGE = False


def _register() -> None:
    global AGENT_LOOP, BRIDGE
    import verl
    from verl.trainer.ppo import core_algos

    import estimators

    from .bridge import make_estimator_fn, verl_name, install_bridge

    if getattr(verl, "__version__", SUPPORTED_VERL) != SUPPORTED_VERL:
        logger.warning("adapters.verl is written for verl==%s; found %s", SUPPORTED_VERL, verl.__version__)
    for name in estimators.available():
        vname = verl_name(name)
        if vname in core_algos.ADV_ESTIMATOR_REGISTRY:
            continue
        core_algos.register_adv_est(vname)(make_estimator_fn(name))
        REGISTERED.append(vname)
    try:
        from . import agent_loop  # noqa: F401  (registers "agentgym")

        AGENT_LOOP = True
    except ImportError as e:
        logger.warning("agentgym agent loop not registered (%s); install 'verl[verl-core]==0.9.1'", e)
    BRIDGE = install_bridge()
    logger.info("agentgym verl plugin: %d estimators, agent loop=%s, bridge=%s", len(REGISTERED), AGENT_LOOP, BRIDGE)


_register()
