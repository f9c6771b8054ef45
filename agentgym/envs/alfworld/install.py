"""``agentgym alfworld setup``: install the ALFWorld engine (the ``alfworld`` extra's packages), showing its compile.

Fast Downward (``fast-downward-textworld``) has no wheel: pip compiles it (C++ with CMake; 1.5 to 5 minutes on 2
cores), and ``pip install -e ".[alfworld]"`` shows only a spinner meanwhile. :func:`install_engine` installs the
same requirements, read from the installed distribution's metadata (so a checkout and a wheel agree with
``pyproject.toml``), with ``pip -v``, whose build output carries CMake's percentages into the progress reports
(:mod:`agentgym.setup_steps`), and with the target interpreter's directory first on ``PATH``: Fast Downward's build
runs ``python``, which must be that interpreter.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, requires

from ...errors import DIST_NAME, AgentGymError
from ...setup_steps import ProgressFn, pip_install

__all__ = ["EXTRA", "engine_requirements", "install_engine"]

EXTRA = "alfworld"
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']alfworld["']""")


def engine_requirements() -> list[str]:
    """The ``alfworld`` extra's requirements, as the installed distribution declares them."""
    try:
        declared = requires(DIST_NAME) or []
    except PackageNotFoundError as e:
        raise AgentGymError(f"{DIST_NAME} is not installed in {sys.prefix}: install it first (pip install -e . in a "
                            f"checkout, pip install {DIST_NAME} otherwise)") from e
    found = [spec.strip() for spec, _, marker in (r.partition(";") for r in declared) if _EXTRA_MARKER.search(marker)]
    if not found:
        raise AgentGymError(f"the installed {DIST_NAME} declares no '{EXTRA}' extra")
    return found


def install_engine(python: str | None = None, *, progress: ProgressFn | None = None) -> list[str]:
    """``pip install -v`` the engine's requirements into ``python`` (default: this interpreter); returns them."""
    reqs = engine_requirements()
    pip_install(python or sys.executable, reqs, verbose=True, progress=progress, what="ALFWorld engine")
    return reqs
