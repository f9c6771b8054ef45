"""How a worker process is confined (the OS-level part; the in-process audit hook lives in ``worker.py``).

* **No network**: the command is prefixed with ``unshare --net`` (a fresh network namespace with only a down
  loopback) when this machine allows it -- checked once per process by running ``unshare --net true``. When it does
  not, a WARNING says so in the logs and the worker relies on its audit hook alone (which refuses every socket
  connect/bind/sendto).
* **Limits** (``resource.setrlimit`` in the child before exec): address space (memory), CPU seconds, file size,
  open files, and no core dumps. Wall-clock limits are enforced by the pool, which kills the whole process group.
* **Workspace**: a fresh directory per worker, its cwd and HOME; the audit hook refuses writes outside it and reads
  outside it, the world data and the Python installation.
* **Scrubbed environment**: only ``PATH``, ``HOME``, ``LANG``, ``TZ`` and ``PYTHONHASHSEED`` pass; the worker runs
  ``python -I`` (ignores ``PYTHON*`` variables and the user site).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["SandboxLimits", "network_isolation_available", "sandbox_command", "scrubbed_env", "limit_setter"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one worker.

    Attributes:
        memory_bytes: RLIMIT_AS (virtual address space) of the worker.
        cpu_seconds: RLIMIT_CPU; the kernel kills the worker past it.
        wall_seconds_per_request: the pool kills a worker whose reply takes longer than this.
        start_seconds: the pool kills a worker that is not ready after this long.
        file_bytes: RLIMIT_FSIZE: largest file the worker may write.
        open_files: RLIMIT_NOFILE.
        cell_timeout_seconds: AppWorld's own per-cell timeout (an "Execution failed" observation, not a kill).
        network: request network isolation (a namespace when available).
    """

    memory_bytes: int = 3 * 1024**3
    cpu_seconds: int = 600
    wall_seconds_per_request: float = 60.0
    start_seconds: float = 120.0
    file_bytes: int = 256 * 1024**2
    open_files: int = 256
    cell_timeout_seconds: int = 10
    network: bool = True


def network_isolation_available() -> bool:
    """Whether ``unshare --net`` works here (root, or unprivileged user namespaces)."""
    return bool(_unshare_prefix())


@lru_cache(maxsize=1)
def _unshare_prefix() -> tuple[str, ...]:
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    for prefix in ((exe, "--net"), (exe, "--map-root-user", "--net")):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


_warned = False
_announced = False


def sandbox_command(argv: list[str], limits: SandboxLimits) -> list[str]:
    """``argv`` wrapped in a network namespace where possible (logs a warning once when it is not)."""
    global _warned, _announced
    if not limits.network:
        logger.warning("AppWorld sandbox: network isolation disabled by the limits (network=False)")
        return list(argv)
    prefix = _unshare_prefix()
    if not prefix:
        if not _warned:
            logger.warning("AppWorld sandbox: network namespaces are NOT available here (unshare --net failed); "
                           "workers are kept off the network only by their in-process audit hook")
            _warned = True
        return list(argv)
    if not _announced:
        logger.info("AppWorld sandbox: workers run in their own network namespace (%s)", " ".join(prefix))
        _announced = True
    return [*prefix, *argv]


def scrubbed_env(workspace: str) -> dict[str, str]:
    """The whole environment a worker gets."""
    return {"PATH": "/usr/bin:/bin", "HOME": workspace, "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"}


def limit_setter(limits: SandboxLimits):
    """A ``preexec_fn`` that applies the rlimits in the child (after fork, before exec)."""

    def apply() -> None:
        import resource

        def setlim(which: int, value: int) -> None:
            soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))

        setlim(resource.RLIMIT_AS, limits.memory_bytes)
        setlim(resource.RLIMIT_CPU, limits.cpu_seconds)
        setlim(resource.RLIMIT_FSIZE, limits.file_bytes)
        setlim(resource.RLIMIT_NOFILE, limits.open_files)
        setlim(resource.RLIMIT_CORE, 0)
        os.setsid()  # own process group: the pool kills the whole group

    return apply
