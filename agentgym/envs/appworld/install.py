"""``agentgym appworld setup [--root DIR]``: the separate virtual environment that runs AppWorld.

AppWorld pins pydantic 1 and fastapi < 0.111, which break the trainers' pydantic 2 code, so it never shares a venv
with agentgym: agentgym itself never imports ``appworld``. ``setup(root)``

1. creates ``ROOT/venv`` (``python -m venv``) and ``pip install appworld==0.1.3.post1`` into it (230 MB from a
   package index; 29 s in our CI);
2. runs ``appworld install`` there, which decrypts the bundled app sources offline (3 s; it unpacks into the
   venv's site-packages and ``~/.appworld``) -- 32 s for the whole setup in our CI;
3. records ``ROOT/install.json`` (interpreter, appworld version) and, when ``ROOT`` is not the default home
   ``~/.cache/agentgym/appworld``, a pointer to ``ROOT`` there (``location.json``);
4. builds our generated task suite into ``ROOT/builds`` (offline, deterministic; ``--no-build`` leaves it to the
   first episode).

:func:`find_install` locates it afterwards: the ``root`` it is given, else ``$AGENTGYM_APPWORLD_HOME``, else the
default home -- its own install, or the one its pointer names. So ``agentgym appworld setup --root DIR`` followed by
a plain ``agentgym eval AppWorld-v0`` finds ``DIR``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import MissingDependencyError
from ...setup_steps import ProgressFn, pip_install

__all__ = ["APPWORLD_VERSION", "AppWorldInstall", "default_root", "find_install", "record_install", "setup"]

logger = logging.getLogger(__name__)

APPWORLD_VERSION = "0.1.3.post1"
_MARKER = "install.json"
_POINTER = "location.json"


@dataclass(frozen=True)
class AppWorldInstall:
    """A usable AppWorld venv: ``root`` (its home), ``python`` (the venv interpreter), ``version``."""

    root: Path
    python: Path
    version: str

    @property
    def builds_dir(self) -> Path:
        return self.root / "builds"

    @property
    def scratch_dir(self) -> Path:
        return self.root / "scratch"


def _home() -> Path:
    return Path.home() / ".cache" / "agentgym" / "appworld"


def default_root() -> Path:
    """Where setup installs without ``--root``: ``$AGENTGYM_APPWORLD_HOME``, else ``~/.cache/agentgym/appworld``."""
    env = os.environ.get("AGENTGYM_APPWORLD_HOME")
    if env:
        return Path(env).expanduser()
    return _home()


def find_install(root: str | os.PathLike | None = None) -> AppWorldInstall | None:
    """The install recorded under ``root``; without one, under :func:`default_root` or, when that is the default
    home, where its pointer says (``setup --root DIR`` leaves one). None when there is none."""
    if root is None and not os.environ.get("AGENTGYM_APPWORLD_HOME"):
        found = _read_install(_home())
        if found is None:
            try:
                pointed = json.loads((_home() / _POINTER).read_text())["root"]
            except (OSError, ValueError, KeyError, TypeError):
                return None
            found = _read_install(Path(pointed))
        return found
    return _read_install(Path(root).expanduser() if root is not None else default_root())


def _read_install(base: Path) -> AppWorldInstall | None:
    marker = base / _MARKER
    if not marker.is_file():
        return None
    try:
        info = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    python = Path(info.get("python", ""))
    if not python.is_file():
        return None
    return AppWorldInstall(root=base, python=python, version=str(info.get("appworld_version", "")))


def require_install(root: str | os.PathLike | None = None) -> AppWorldInstall:
    """:func:`find_install` or a :class:`MissingDependencyError` naming the setup command."""
    inst = find_install(root)
    if inst is None:
        err = MissingDependencyError("appworld", "appworld", "AppWorld-v0")
        err.args = (f"the AppWorld venv is not set up under {root or default_root()}: run `agentgym appworld "
                    "setup` (or python -m agentgym.envs.appworld.cli setup), which makes a separate venv with "
                    f"appworld=={APPWORLD_VERSION} and runs `appworld install`",)
        raise err
    return inst


def _run(cmd: list[str], **kw) -> None:
    logger.info("running %s", " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def setup(root: str | os.PathLike | None = None, *, python: str | None = None,
          pip_args: tuple[str, ...] = (), progress: ProgressFn | None = None) -> AppWorldInstall:
    """Create (or complete) the AppWorld venv under ``root``; returns the install. Idempotent. ``progress`` receives
    the pip step's reports (:mod:`agentgym.setup_steps`; the CLI draws them as bars)."""
    base = Path(root).expanduser() if root is not None else default_root()
    base.mkdir(parents=True, exist_ok=True)
    venv = base / "venv"
    vpy = venv / "bin" / "python"
    t0 = time.monotonic()
    if not vpy.is_file():
        _run([python or sys.executable, "-m", "venv", str(venv)])
    check = subprocess.run([str(vpy), "-c", "import appworld, sys; sys.stdout.write(appworld.__version__)"],
                           capture_output=True, text=True)
    if check.returncode != 0 or check.stdout.strip() != APPWORLD_VERSION:
        pip_install(str(vpy), [f"appworld=={APPWORLD_VERSION}"], extra_args=pip_args, progress=progress,
                    what="AppWorld venv")
    t_pip = time.monotonic() - t0
    # `appworld install` decrypts the app sources bundled in the wheel (offline). It is idempotent.
    _run([str(venv / "bin" / "appworld"), "install"], cwd=str(base), stdout=subprocess.DEVNULL)
    inst = record_install(base, vpy)
    logger.info("AppWorld venv ready at %s (pip %.0fs, total %.0fs)", venv, t_pip, time.monotonic() - t0)
    return inst


def record_install(root: str | os.PathLike, python: str | os.PathLike) -> AppWorldInstall:
    """Record a set-up venv: ``root/install.json``, and a pointer to ``root`` in the default home when ``root`` is
    elsewhere, so that :func:`find_install` finds it without being told."""
    base = Path(root).expanduser().resolve()
    (base / _MARKER).write_text(json.dumps({"python": str(python), "appworld_version": APPWORLD_VERSION,
                                            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                           indent=1))
    if base != _home().resolve():
        _home().mkdir(parents=True, exist_ok=True)
        (_home() / _POINTER).write_text(json.dumps({"root": str(base)}) + "\n")
    inst = _read_install(base)
    if inst is None:
        raise MissingDependencyError("appworld", "appworld", f"AppWorld-v0 ({python} is not a file)")
    return inst
