"""Progress bars of the set-up commands (``agentgym appworld setup``, ``agentgym alfworld setup``); CLI code only.

:class:`StepBars` receives the :class:`~agentgym.setup_steps.StepProgress` reports of library code and draws one tqdm
bar per step on stderr. Where stderr is not a terminal (a CI log, a file) it prints a line when a step starts and
at each further tenth of a step whose total is known, so a log shows the progress without a line per package.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .setup_steps import StepProgress

__all__ = ["StepBars"]


class StepBars:
    def __init__(self, file: TextIO | None = None):
        self.file = file if file is not None else sys.stderr
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self.step: str | None = None
        self.bar = None
        self.tenth = -1

    def __call__(self, report: StepProgress) -> None:
        if report.step != self.step:
            self.close()
            self.step, self.tenth = report.step, -1
            if self.tty:
                from tqdm import tqdm

                self.bar = tqdm(total=report.total, desc=report.step, file=self.file, leave=True,
                                bar_format=None if report.total else "{desc}: {n} {postfix} [{elapsed}]")
            else:
                self.file.write(f"{report.step}: started {report.detail}".rstrip() + "\n")
        if self.bar is not None:
            self.bar.n = report.done
            self.bar.set_postfix_str(report.detail[:50], refresh=False)
            self.bar.refresh()
        elif report.total:
            tenth = min(10, report.done * 10 // report.total)
            if tenth > self.tenth and tenth > 0:
                self.tenth = tenth
                self.file.write(f"{report.step}: {report.done}/{report.total} {report.detail[:60]}".rstrip() + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "StepBars":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
