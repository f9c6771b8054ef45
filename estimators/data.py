"""Alias of :mod:`estimators.batch` (the spec section 10 layout names it data.py)."""

from .batch import *  # noqa: F401,F403
from .batch import __all__  # noqa: F401
