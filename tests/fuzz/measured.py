"""Run a command in a child process and read its peak RSS (the attacks about memory are checked this way).

The command runs under a small launcher process (:data:`_LAUNCHER`) that reports ``getrusage(RUSAGE_CHILDREN)``
once the command has exited. Why a launcher: on Linux a child's ``ru_maxrss`` also counts the memory of the process
it was forked from (``exec`` records the old address space's high-water mark), so a command started straight from a
large test process (pytest after a few hundred tests) reads as at least as large as pytest. Forked from the
launcher, it carries only the launcher's few MB. Bounded: the launcher's process group is killed at ``timeout_s``.
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

# argv: REPORT_PATH CMD...; runs CMD, writes "<exit code> <peak RSS in KiB (bytes on macOS)>" to REPORT_PATH.
_LAUNCHER = ("import resource, subprocess, sys\n"
             "rc = subprocess.call(sys.argv[2:])\n"
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
             "open(sys.argv[1], 'w').write(f'{rc} {peak}')\n"
             "sys.exit(rc)\n")


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
    """Run ``cmd`` to its end (killed at ``timeout_s``: returncode -9) and measure its peak RSS."""
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "rusage")
        out_path, err_path = os.path.join(d, "out"), os.path.join(d, "err")
        t0 = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, report, *cmd], stdout=out, stderr=err, env=env,
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        wall = time.monotonic() - t0
        peak = 0.0
        if os.path.exists(report):
            rc_text, peak_text = open(report).read().split()
            returncode = int(rc_text)
            peak = int(peak_text) / (1024 * 1024 if sys.platform == "darwin" else 1024)
        else:
            returncode = -signal.SIGKILL
        with open(out_path, "rb") as fh:
            stdout = fh.read().decode("utf-8", "replace")
        with open(err_path, "rb") as fh:
            stderr = fh.read().decode("utf-8", "replace")
        return Measured(returncode, stdout, stderr, peak, wall)
