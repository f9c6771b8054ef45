"""How a worker process is confined (the OS-level part; the in-process audit hook lives in ``worker.py``).

* **No network**: the command is prefixed with ``unshare --net`` (a fresh network namespace with only a down
  loopback) when this machine allows it -- checked once per process by running ``unshare --net true``. When it does
  not, a WARNING says so in the logs and the worker relies on its audit hook alone (which refuses every socket
  connect/bind/sendto).
* **Limits** (``resource.setrlimit``, :func:`rlimits`): address space (memory), CPU seconds, file size, open
  files and no core dumps. A worker lowers them itself right after the fork server forks it (:mod:`.pool`).
  Processes (``RLIMIT_NPROC``: the user's current count plus :attr:`SandboxLimits.processes`, so a fork bomb that
  got past the audit hook stops there -- the kernel does not apply it to root) only where the seccomp filter below
  could not be installed: the kernel counts every thread of the user against it, so on a busy machine it could
  starve AppWorld's own threads, and the filter refuses every new process anyway. Wall-clock limits are enforced by
  the pool, which kills the whole process group.
* **No new processes, no reaching others**: each worker installs a seccomp filter right after it is forked
  (``worker.py``), so the kernel refuses fork/exec/spawn, ptrace, process_vm_*, pidfd_* and signals to any other
  process whatever code asks; a WARNING says so where the kernel does not allow it.
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

__all__ = ["SandboxLimits", "network_isolation_available", "sandbox_command", "scrubbed_env", "rlimits"]

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
        processes: RLIMIT_NPROC headroom: processes and threads the worker may add to those its user already runs
            (applied only where the seccomp filter is unavailable).
    """

    memory_bytes: int = 3 * 1024**3
    cpu_seconds: int = 600
    wall_seconds_per_request: float = 60.0
    start_seconds: float = 120.0
    file_bytes: int = 256 * 1024**2
    open_files: int = 256
    cell_timeout_seconds: int = 10
    network: bool = True
    processes: int = 64


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


def _user_tasks() -> int:
    """Processes and threads of this user now (RLIMIT_NPROC counts both, per user)."""
    uid, n = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue  # the process ended meanwhile
    return n


def rlimits(limits: SandboxLimits) -> dict[str, int]:
    """The rlimits of a worker, by ``resource`` name (computed now, in the parent)."""
    return {"RLIMIT_AS": limits.memory_bytes, "RLIMIT_CPU": limits.cpu_seconds, "RLIMIT_FSIZE": limits.file_bytes,
            "RLIMIT_NOFILE": limits.open_files, "RLIMIT_CORE": 0,
            "RLIMIT_NPROC": _user_tasks() + limits.processes}

