"""Frozen config dataclasses, one per estimator family; defaults are the spec's (sections 3-5, 9)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterable, Sequence

__all__ = [
    "ConfigError",
    "OutcomeConfig",
    "DAPOConfig",
    "GiGPOConfig",
    "HGPOConfig",
    "BiGPOConfig",
    "BiPACEConfig",
    "A2TGPOConfig",
    "IGPOConfig",
    "GVPOConfig",
    "PVPOConfig",
    "SGCDConfig",
]


class ConfigError(ValueError):
    """An unknown config key or an invalid config value."""


def _choice(cfg: Any, name: str, allowed: Sequence[Any]) -> None:
    value = getattr(cfg, name)
    if value not in allowed:
        raise ConfigError(f"{type(cfg).__name__}.{name}={value!r} is not one of {list(allowed)}")


def _positive(cfg: Any, name: str, strict: bool = False) -> None:
    value = getattr(cfg, name)
    if value is None or value < 0 or (strict and value == 0):
        raise ConfigError(f"{type(cfg).__name__}.{name}={value!r} must be {'>' if strict else '>='} 0")


def config_keys(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def check_config_keys(cls: type, keys: Iterable[str], where: str, *, sort_valid: bool = False) -> None:
    """Raise :class:`ConfigError` naming the ``keys`` that are not fields of config class ``cls`` (``where``: what
    was called, for the message) and listing the valid ones (in field order, or sorted with ``sort_valid``)."""
    valid = config_keys(cls)
    unknown = sorted(set(keys) - set(valid))
    if unknown:
        raise ConfigError(f"unknown config key(s) {unknown} for {where}; valid keys: "
                          f"{sorted(valid) if sort_valid else valid}")


@dataclass(frozen=True)
class OutcomeConfig:
    """GRPO / Dr.GRPO / RLOO (spec 3.1-3.3).

    ``verl_compat`` (GRPO and RLOO only, spec 2.1; ``dr_grpo`` rejects it): singleton groups get the raw reward,
    as in verl. ``episode_stats``: ``"per_traj"`` (default) takes the group statistic over one return per
    trajectory; ``"per_step"`` over every turn row, as verl-agent's GRPO does with its default
    ``compute_mean_std_cross_steps=True`` and its RLOO does by construction (a group's rows are its members), so
    longer trajectories weigh more and RLOO leaves one *row* out. With one row per trajectory the two agree.
    """

    verl_compat: bool = False
    episode_stats: str = "per_traj"

    def __post_init__(self) -> None:
        _choice(self, "episode_stats", ("per_traj", "per_step"))


@dataclass(frozen=True)
class DAPOConfig:
    """DAPO sampling and reward pieces (spec 3.4): GRPO advantage, dynamic-sampling filter, overlong shaping.

    ``overlong_shaping`` adds the soft length penalty (``overlong_max`` = L_max, ``overlong_cache`` = L_cache);
    ``overlong_filter`` zeroes the loss mask of truncated trajectories; ``dynamic_sampling`` applies the spec 2.5
    filter on ``filter_on`` (``success`` by default).
    """

    overlong_max: int = 20480
    overlong_cache: int = 4096
    overlong_shaping: bool = False
    overlong_filter: bool = False
    dynamic_sampling: bool = True
    filter_on: str = "success"
    verl_compat: bool = False

    def __post_init__(self) -> None:
        _choice(self, "filter_on", ("success", "reward"))
        if not 0 < self.overlong_cache <= self.overlong_max:
            raise ConfigError("DAPOConfig needs 0 < overlong_cache <= overlong_max")


@dataclass(frozen=True)
class GiGPOConfig:
    """GiGPO (spec 4.1). ``invalid_action_penalty`` is kappa_inv (0 disables; spec 2.2).

    Options that reproduce verl-agent's conventions (spec 2.2; all off by default, all on in :meth:`verl_agent`):

    * ``episode_stats="per_step"``: the episode term's group statistic counts every step row (verl-agent's
      ``compute_mean_std_cross_steps=True``) instead of one return per trajectory.
    * ``penalty_in_episode_term="per_row"``: each row's episode score is R(tau) minus that row's own penalty.
    * ``penalty_in_step_returns="none"``: the step term's returns-to-go are discounted from the env rewards r_k,
      not from the penalized r'_k. verl-agent computes them before it applies the penalty, so there the penalty
      never reaches the step term. Default ``"discounted"`` (spec 2.3: returns of r').
    * ``episode_singleton="raw"``: a group with a single member in the episode statistic gets its raw score
      (verl-agent: mean 0, std 1) instead of 0.
    """

    gamma: float = 0.95
    step_advantage_w: float = 1.0
    mode: str = "mean_std_norm"
    invalid_action_penalty: float = 0.1
    episode_stats: str = "per_traj"
    penalty_in_episode_term: str = "none"
    penalty_in_step_returns: str = "discounted"
    episode_singleton: str = "zero"

    def __post_init__(self) -> None:
        _choice(self, "mode", ("mean_norm", "mean_std_norm"))
        _choice(self, "episode_stats", ("per_traj", "per_step"))
        _choice(self, "penalty_in_episode_term", ("none", "per_row"))
        _choice(self, "penalty_in_step_returns", ("discounted", "none"))
        _choice(self, "episode_singleton", ("zero", "raw"))
        _positive(self, "gamma")
        _positive(self, "invalid_action_penalty")

    @classmethod
    def verl_agent(cls, **overrides: Any) -> "GiGPOConfig":
        """verl-agent's GiGPO as a whole (``gigpo/core_gigpo.py`` with its ALFWorld/WebShop run scripts):
        gamma 0.95, w = 1, ``mean_std_norm`` (the scripts' setting; verl-agent's yaml default is ``mean_norm``:
        pass ``mode="mean_norm"`` to get it), invalid-action penalty 0.1 applied per row to the episode score and
        kept out of the step returns, episode statistics over step rows, raw score for a one-row group.
        ``overrides`` replace any field (``GiGPOConfig.verl_agent(mode="mean_norm")``). Also available as the
        estimator config key ``preset="verl-agent"`` through :func:`estimators.make_config`."""
        base = dict(gamma=0.95, step_advantage_w=1.0, mode="mean_std_norm", invalid_action_penalty=0.1,
                    episode_stats="per_step", penalty_in_episode_term="per_row", penalty_in_step_returns="none",
                    episode_singleton="raw")
        check_config_keys(cls, overrides, f"{cls.__name__}.verl_agent()", sort_valid=True)
        return cls(**{**base, **overrides})


@dataclass(frozen=True)
class HGPOConfig(GiGPOConfig):
    """HGPO (spec 4.2, reference only): levels k = 1..history_length+1, weights (k+1)^alpha.

    ``base_level`` adds level k = 0 holding the trajectory (episode) advantage. ``history_length`` = 2 is our
    default (the spec gives none).
    """

    history_length: int = 2
    alpha: float = 1.0
    base_level: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.history_length < 0:
            raise ConfigError("HGPOConfig.history_length must be >= 0")


@dataclass(frozen=True)
class BiGPOConfig(GiGPOConfig):
    """BiGPO / BiPACE (spec 4.3, 4.4).

    ``eps`` None means the embedder's default (embedding 0.10, identity 0.0, hash_ngram 0.25). ``embedder``:
    ``embedding`` (the batch's column), ``identity`` (one-hot of obs_hash within the group) or ``hash_ngram``
    (needs ``obs_text``, one string per turn row). ``pace``: ``gigpo`` (state-only), ``q`` or ``diff``.
    ``calibrate_eps`` runs the App. F search on *this* batch and uses its result (``diagnostics["eps_used"]``).
    The paper calibrates once, at the first training step: pass ``eps_used`` back as ``eps`` on later steps, or
    let :class:`estimators.EpsCalibrator` do it. ``calibrate_eps=True`` together with an explicit ``eps`` raises.
    """

    eps: float | None = None
    atol: float = 1e-6
    embedder: str = "embedding"
    pace: str = "gigpo"
    fallback: str = "rloo"
    calibrate_eps: bool = False
    obs_text: Sequence[str] | None = None
    hash_ngram_n: int = 3
    hash_ngram_dim: int = 2048

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self, "embedder", ("embedding", "identity", "hash_ngram"))
        _choice(self, "pace", ("gigpo", "q", "diff"))
        _choice(self, "fallback", ("rloo", "none"))
        if self.eps is not None and not 0 <= self.eps <= 2:
            raise ConfigError("BiGPOConfig.eps must lie in [0, 2]")
        if self.eps is not None and self.calibrate_eps:
            raise ConfigError("BiGPOConfig: pass either eps or calibrate_eps=True, not both")
        _positive(self, "atol")

    def resolved_eps(self) -> float:
        if self.eps is not None:
            return float(self.eps)
        return {"embedding": 0.10, "identity": 0.0, "hash_ngram": 0.25}[self.embedder]


@dataclass(frozen=True)
class BiPACEConfig(BiGPOConfig):
    """BiPACE: BiGPO clusters + PACE (default Q-style, spec 5)."""

    pace: str = "q"


@dataclass(frozen=True)
class A2TGPOConfig:
    """A2TGPO (spec 4.5): gamma, alpha (adv_rescale_alpha), clip_lambda (lambda), norm_mode."""

    gamma: float = 1.0
    alpha: float = 0.3
    clip_lambda: float = 0.3
    norm_mode: str = "turn_group"

    def __post_init__(self) -> None:
        _choice(self, "norm_mode", ("turn_group", "joint"))
        _positive(self, "gamma")
        if not 0 <= self.clip_lambda < 1:
            raise ConfigError("clip_lambda must lie in [0, 1)")


@dataclass(frozen=True)
class IGPOConfig(A2TGPOConfig):
    """IGPO (spec 4.5, ``norm_mode="joint"``). alpha scales the accumulated advantage (1 = IGPO); clip_lambda
    > 0 adds A2TGPO's adaptive clip on process turns (0 = IGPO's fixed clip)."""

    alpha: float = 1.0
    clip_lambda: float = 0.0
    norm_mode: str = "joint"


@dataclass(frozen=True)
class GVPOConfig:
    """GVPO (spec 4.6): b, std_norm, shaping (``case`` / ``additive``), zeta tolerance."""

    b: float = 0.2
    std_norm: bool = False
    shaping: str = "case"
    zeta: float = 1e-8

    def __post_init__(self) -> None:
        _choice(self, "shaping", ("case", "additive"))
        _positive(self, "b")


@dataclass(frozen=True)
class PVPOConfig:
    """PVPO (spec 4.7): ``v_table`` is a :class:`estimators.pvpo.StaticValueTable` (required);
    ``current_step`` (optional) feeds the ``v_table_age_steps`` diagnostic."""

    v_table: Any = None
    current_step: int | None = None


@dataclass(frozen=True)
class SGCDConfig:
    """SGCD (spec 4.8)."""

    gamma_s: float = 1.0
    c: float = 2.0
    top_k: int = 100
    divergence: str = "rkl"
    onset: float = 0.1
    entropy_ratio: float = 1.5

    def __post_init__(self) -> None:
        _choice(self, "divergence", ("rkl", "fkl", "jsd"))
        if self.c < 1:
            raise ConfigError("SGCDConfig.c must be >= 1")
        _positive(self, "gamma_s")
        if self.top_k < 1:
            raise ConfigError("SGCDConfig.top_k must be >= 1")
