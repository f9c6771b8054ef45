"""``agentgym appworld setup|where|validate``: the command line of the AppWorld venv (:mod:`.install`) and of the
suite's validation (:mod:`.validate`)."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time

from .install import default_root, find_install, setup

__all__ = ["main"]

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """CLI: ``agentgym appworld setup [--root DIR]``."""
    parser = argparse.ArgumentParser(prog="agentgym appworld", description="Manage the AppWorld venv.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup", help="create the AppWorld venv and run `appworld install`")
    p.add_argument("--root", default=None, help=f"where (default: $AGENTGYM_APPWORLD_HOME or {default_root()})")
    p.add_argument("--python", default=None, help="interpreter for the venv (default: this one)")
    p.add_argument("--no-build", action="store_true", help="do not build our task suite now (the first episode will)")
    sub.add_parser("where", help="print the recorded install, if any")
    sub.add_parser("validate", help="play every task's gold and wrong solution (see agentgym.envs.appworld.validate)",
                   add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "validate":
        from .validate import main as validate_main

        return validate_main(argv[1:])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "setup":
        from ...cli_progress import StepBars

        with StepBars() as bars:  # pip's packages, then the suite's tasks (the two long steps: a minute or more each)
            try:
                inst = setup(args.root, python=args.python, progress=bars)
            except subprocess.CalledProcessError as e:
                bars.close()
                sys.stderr.write(f"error: {' '.join(map(str, e.cmd))} failed (exit {e.returncode}); its last "
                                 f"lines:\n{e.output or ''}\n")
                return 1
            if not args.no_build:
                from .tasks import ensure_build

                t0 = time.monotonic()
                build = ensure_build(inst, progress=bars)
                bars.close()
                logger.info("our AppWorld task suite is built at %s (%.0fs)", build.root, time.monotonic() - t0)
        sys.stdout.write(json.dumps({"root": str(inst.root), "python": str(inst.python),
                                     "version": inst.version}) + "\n")
        return 0
    inst = find_install()
    sys.stdout.write((json.dumps({"root": str(inst.root), "python": str(inst.python), "version": inst.version})
                      if inst else "not set up") + "\n")
    return 0 if inst else 1


if __name__ == "__main__":
    sys.exit(main())
