"""Progress of the long set-up steps (agentgym.setup_steps, agentgym.cli_progress): a child's output read line by line,
pip's lines turned into reports, the CLI's lines where stderr is not a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from agentgym.cli_progress import StepBars
from agentgym.setup_steps import PipLines, StepProgress, run_lines

# Lines of `pip install -v fast-downward-textworld==20.6.4` (pip 23.2, a real compile on this project's CI machine),
# abridged: the indented lines of the build's own environment, CMake's configure output, the compile's percentages.
PIP_V_COMPILE = """\
Using pip 23.2.1 from /tmp/v/lib/python3.11/site-packages/pip (python 3.11)
Collecting fast-downward-textworld==20.6.4
  Downloading fast-downward-textworld-20.6.4.tar.gz (1.4 MB)
  Running command pip subprocess to install build dependencies
  Collecting setuptools>=61.0
  Collecting cmake
  Installing collected packages: setuptools, cmake
  Successfully installed cmake-4.4.5 setuptools-84.2.1
  Running command Getting requirements to build wheel
  -- The CXX compiler identification is GNU 12.2.0
  [  1%] Building CXX object search/CMakeFiles/downward.dir/task_utils/task_properties.cc.o
  [  2%] Building CXX object search/CMakeFiles/downward.dir/task_utils/successor_generator_internals.cc.o
  [ 48%] Building CXX object search/CMakeFiles/downward.dir/search_engines/lazy_search.cc.o
  [100%] Linking CXX shared library libdownward.so
  Building wheel for fast-downward-textworld (pyproject.toml): started
Collecting textworld==1.7.0
Installing collected packages: fast-downward-textworld, textworld
Successfully installed fast-downward-textworld-20.6.4 textworld-1.7.0
""".splitlines()


def test_pip_lines_report_resolve_compile_and_install():
    reports: list[StepProgress] = []
    lines = PipLines(reports.append, "test")
    for line in PIP_V_COMPILE:
        lines(line)
    steps = [r.step for r in reports]
    # only pip's own top-level lines count: the build environment's indented Collecting/Installing lines do not
    assert steps == ["resolve"] + ["compile fast-downward-textworld"] * 4 + ["resolve", "install", "install"]
    compile_ = [r for r in reports if r.step.startswith("compile")]
    assert [r.done for r in compile_] == [1, 2, 48, 100] and {r.total for r in compile_} == {100}
    assert compile_[-1].detail == "Linking CXX shared library libdownward.so"
    assert reports[0] == StepProgress("resolve", 1, None, "fast-downward-textworld==20.6.4")
    assert reports[5].done == 2 and reports[5].detail == "textworld==1.7.0"
    assert reports[-2:] == [StepProgress("install", 0, 2, "fast-downward-textworld, textworld"),
                            StepProgress("install", 2, 2, "")]


def test_run_lines_hands_over_each_line_as_it_comes_and_reports_failures():
    seen: list[tuple[float, str]] = []
    code = "import sys, time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.3)\n"
    run_lines([sys.executable, "-c", code], lambda line: seen.append((time.monotonic(), line)))
    assert [line for _, line in seen] == ["line 0", "line 1", "line 2"]
    assert seen[2][0] - seen[0][0] > 0.3  # read while the child ran, not at its end
    fail = "import sys\nprint('working'); print('boom', file=sys.stderr); sys.exit(3)\n"
    with pytest.raises(subprocess.CalledProcessError) as e:
        run_lines([sys.executable, "-c", fail], lambda line: None)
    assert e.value.returncode == 3 and e.value.output.splitlines() == ["working", "boom"]


def test_run_lines_stops_a_command_past_its_timeout():
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_lines([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], lambda line: None,
                  timeout=1.0)
    assert time.monotonic() - started < 30 and e.value.output == "up"


def test_step_bars_without_a_terminal_print_a_line_per_step_and_tenth():
    out = io.StringIO()  # not a terminal: a CI log
    with StepBars(out) as bars:
        lines = PipLines(bars, "test")
        for line in PIP_V_COMPILE:
            lines(line)
        for done in range(0, 217, 9):
            bars(StepProgress("build tasks", done, 216, f"task{done}"))
    text = out.getvalue().splitlines()
    assert text[:2] == ["resolve: started fast-downward-textworld==20.6.4",
                        "compile fast-downward-textworld: started Building CXX object "
                        "search/CMakeFiles/downward.dir/task_utils/task_properties.cc.o"]
    compiled = [t for t in text if t.startswith("compile fast-downward-textworld: ") and "/100" in t]
    assert [t.split()[2] for t in compiled] == ["48/100", "100/100"]  # the tenths reached, not every percentage
    i = text.index("resolve: started textworld==1.7.0")
    assert text[i + 1:i + 3] == ["install: started fast-downward-textworld, textworld", "install: 2/2"]
    build = [t for t in text if t.startswith("build tasks: ") and "/216" in t]
    assert len(build) == 10 and build[-1] == "build tasks: 216/216 task216"  # one line per tenth, not per task
