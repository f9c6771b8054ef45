"""Long set-up steps run as child processes (pip installs, compiles, the AppWorld suite build), read line by line.

Library code reports each step's progress to an optional callback as :class:`StepProgress` values and logs the
child's output at debug level; a command line turns the reports into a progress bar (:mod:`agentgym.console`).
Without a callback nothing is printed, only logged.

:func:`run_lines` runs a command and hands every output line to a function as it arrives; :class:`PipLines` reads
pip's output (``Collecting``, ``Installing collected packages``, and, with ``-v``, a compile's ``[ 42%]`` lines from
CMake) and :func:`pip_install` puts the two together.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["StepProgress", "ProgressFn", "run_lines", "PipLines", "pip_install"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepProgress:
    """Where a step stands: ``done`` of ``total`` units (None: unknown), what it is doing now (``detail``)."""

    step: str
    done: int
    total: int | None = None
    detail: str = ""


ProgressFn = Callable[[StepProgress], None]

#: lines of a failed command's output kept for its error
TAIL_LINES = 60


def run_lines(cmd: Sequence[str], on_line: Callable[[str], None], *, cwd: str | None = None,
              env: dict | None = None, timeout: float | None = None) -> None:
    """Run ``cmd`` (stdout and stderr merged) and call ``on_line`` with each output line, as it arrives.

    A non-zero exit raises :class:`subprocess.CalledProcessError` whose ``output`` is the last lines of the output;
    ``timeout`` seconds kill the command and raise :class:`subprocess.TimeoutExpired`."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", cwd=cwd, env=env)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout, kill) if timeout is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            logger.debug("%s", line)
            on_line(line)
    finally:
        if timer is not None:
            timer.cancel()
        proc.stdout.close()
        code = proc.wait()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(list(cmd), timeout, output="\n".join(tail))
    if code != 0:
        raise subprocess.CalledProcessError(code, list(cmd), output="\n".join(tail))


_COLLECTING = re.compile(r"^Collecting (\S+)")
_PERCENT = re.compile(r"^\s*\[\s*(\d{1,3})%\]")
_INSTALLING = re.compile(r"^Installing collected packages: (.+)$")
_NAME = re.compile(r"[A-Za-z0-9._-]*")  # a requirement's project name


class PipLines:
    """Turns pip's output lines into progress reports: ``resolve`` (one unit per package collected, total unknown),
    ``compile <package>`` (the percentages a CMake build prints, which pip shows with ``-v``: a source package's
    compile, e.g. Fast Downward's, which runs while pip gets its build requirements), ``install`` (the packages, all at
    once: pip reports no progress inside that step). A new step is also logged at info level.

    Only pip's own top-level lines count: the indented ones belong to a build's isolated environment."""

    def __init__(self, progress: ProgressFn | None, what: str):
        self.progress, self.what = progress, what
        self.collected = 0
        self.package = ""
        self.installing = 0
        self.step = ""

    def _report(self, report: StepProgress) -> None:
        if report.step != self.step:
            self.step = report.step
            logger.info("%s: %s %s", self.what, report.step, report.detail)
        if self.progress is not None:
            self.progress(report)

    def __call__(self, line: str) -> None:
        if m := _COLLECTING.match(line):
            self.collected += 1
            self.package = m.group(1)
            self._report(StepProgress("resolve", self.collected, None, m.group(1)))
        elif m := _PERCENT.match(line):
            step = f"compile {_NAME.match(self.package).group(0)}".rstrip()
            self._report(StepProgress(step, min(100, int(m.group(1))), 100, line.split("]", 1)[-1].strip()))
        elif m := _INSTALLING.match(line):
            self.installing = len(m.group(1).split(","))
            self._report(StepProgress("install", 0, self.installing, m.group(1)[:60]))
        elif line.startswith("Successfully installed"):
            n = self.installing or len(line.split()) - 2
            self._report(StepProgress("install", n, n, ""))


def pip_install(python: str, requirements: Sequence[str], *, progress: ProgressFn | None = None,
                verbose: bool = False, extra_args: Sequence[str] = (), what: str = "pip",
                env: dict | None = None) -> None:
    """``python -m pip install REQUIREMENTS`` with progress reports (see :class:`PipLines`). ``verbose`` adds
    ``-v``, which streams a source build's own output (a compile's percentages). The interpreter's directory leads
    ``PATH``: a build that runs ``python`` gets this interpreter."""
    cmd = [python, "-m", "pip", "install", "--progress-bar", "off", *(["-v"] if verbose else []), *extra_args,
           *requirements]
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.path.dirname(os.path.abspath(python)) + os.pathsep + env.get("PATH", "")
    logger.info("running %s", " ".join(cmd))
    run_lines(cmd, PipLines(progress, what), env=env)
