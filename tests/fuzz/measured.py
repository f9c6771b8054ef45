"""Run a command in a child process and read its peak RSS (the attacks about memory are checked this way).

``os.wait4`` reaps exactly that child and returns its own ``ru_maxrss``, unlike ``getrusage(RUSAGE_CHILDREN)``, which
is the largest of every child the test process ever waited for. Bounded: the child is killed at ``timeout_s``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

#: The interpreter line that runs ``agentgym`` as if the ``openai`` extra (aiohttp) were not installed: the urllib
#: transport, as a user without the extra gets it.
WITHOUT_AIOHTTP = ("import sys; sys.modules['aiohttp'] = None; from agentgym.cli import main; "
                   "sys.exit(main(sys.argv[1:]))")


@dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_mb: float
    wall_s: float


def agentgym(*args: str, urllib_only: bool = False) -> list[str]:
    """The command line of ``agentgym ARGS`` in this interpreter (the checkout's code: PYTHONPATH is inherited)."""
    if urllib_only:
        return [sys.executable, "-c", WITHOUT_AIOHTTP, *args]
    return [sys.executable, "-m", "agentgym.cli", *args]


def run_measured(cmd: list[str], timeout_s: float = 120.0, env: dict | None = None) -> Measured:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        status = rusage = None
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout_s:
                proc.send_signal(signal.SIGKILL)
                pid, status, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        # ru_maxrss: KiB on Linux, bytes on macOS
        peak = rusage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
        return Measured(proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                        peak, wall)
