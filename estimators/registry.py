"""Name -> estimator registry in the style of verl's ``core_algos.py`` (spec section 10).

``@register("name", ConfigClass)`` adds an estimator ``fn(batch, config) -> AdvantageResult``;
``compute_advantage(name, batch, **config)`` builds the frozen config (unknown keys raise :class:`ConfigError`)
and runs it; ``available()`` lists the names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .batch import TrajectoryBatch
from .configs import ConfigError, check_config_keys
from .result import AdvantageResult

__all__ = ["register", "compute_advantage", "available", "get_estimator", "make_config", "EstimatorSpec",
           "PRESETS"]


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    fn: Callable[[TrajectoryBatch, Any], AdvantageResult]
    config_cls: type


_REGISTRY: dict[str, EstimatorSpec] = {}


def register(name: str, config_cls: type) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(batch, config)`` under ``name`` with its frozen config dataclass."""

    def deco(fn: Callable) -> Callable:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"estimator {name!r} is already registered")
        _REGISTRY[name] = EstimatorSpec(name, fn, config_cls)
        return fn

    return deco


def available() -> list[str]:
    """Registered estimator names, sorted."""
    return sorted(_REGISTRY)


def get_estimator(name: str) -> EstimatorSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown estimator {name!r}; available: {', '.join(available())}") from None


#: (estimator, preset name) -> the config class method that builds it (``preset="verl-agent"``).
PRESETS: dict[tuple[str, str], str] = {("gigpo", "verl-agent"): "verl_agent"}


def make_config(name: str, **config: Any) -> Any:
    """Build the config of estimator ``name``; unknown keys raise :class:`ConfigError` listing the valid ones.

    ``preset="verl-agent"`` (GiGPO) starts from a named preset (:data:`PRESETS`); the other keys override it."""
    spec = get_estimator(name)
    preset = config.pop("preset", None)
    if preset is not None:
        method = PRESETS.get((name, preset))
        if method is None:
            known = sorted(p for n, p in PRESETS if n == name)
            raise ConfigError(f"estimator {name!r} has no preset {preset!r}; presets: {known or 'none'}")
        return getattr(spec.config_cls, method)(**config)
    check_config_keys(spec.config_cls, config, f"estimator {name!r}")
    return spec.config_cls(**config)


def compute_advantage(name: str, batch: TrajectoryBatch, config: Any = None, **kwargs: Any) -> AdvantageResult:
    """Run estimator ``name`` on ``batch``.

    Config either as keyword arguments (``gamma=0.9``) or as a ready config instance via ``config=``
    (not both). The computation is pure: the batch is not modified.
    """
    spec = get_estimator(name)
    if config is not None:
        if kwargs:
            raise ConfigError("pass either config= or keyword config values, not both")
        if not isinstance(config, spec.config_cls):
            raise ConfigError(f"config for {name!r} must be a {spec.config_cls.__name__}, got {type(config).__name__}")
        cfg = config
    else:
        cfg = make_config(name, **kwargs)
    if not isinstance(batch, TrajectoryBatch):
        raise TypeError(f"compute_advantage expects a TrajectoryBatch, got {type(batch).__name__}")
    return spec.fn(batch, cfg)
