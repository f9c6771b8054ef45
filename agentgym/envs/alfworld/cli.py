"""``agentgym alfworld setup|generate``: install the ALFWorld engine with a progress bar (:mod:`.install`), and write
expert-verified games in the official layout (:mod:`.generate`)."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from ...errors import AgentGymError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym alfworld", description="ALFWorld tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup", description="Install the ALFWorld engine (the alfworld extra's packages) into an "
                                            "interpreter, with a progress bar for Fast Downward's compile.",
                       help="install the ALFWorld engine, showing the compile's progress")
    s.add_argument("--python", default=None, help="the interpreter to install into (default: this one)")
    g = sub.add_parser("generate", description="Write expert-verified ALFWorld games in the official layout.",
                       help="write expert-verified games in ALFWorld's layout (OUT/<split>/<task>/<trial>/)")
    g.add_argument("--out", required=True, help="output root; games go to OUT/<split>/<task>/<trial>/ (for "
                                                "alfworld's own AlfredTWEnv: --out $ALFWORLD_DATA/json_2.1.1 "
                                                "--split train)")
    g.add_argument("--n", type=int, required=True, help="number of games")
    g.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    g.add_argument("--split", default="generated", help="split folder name (default: generated)")
    g.add_argument("--start", type=int, default=0, help="first game index (default: 0)")
    from .scenes import FAMILIES

    g.add_argument("--family", action="append", choices=FAMILIES, help="restrict to these families, repeatable "
                                                                        "(default: every family, in turn)")
    return parser


def _setup(args) -> int:
    from ...cli_progress import StepBars
    from .install import install_engine

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        with StepBars() as bars:
            reqs = install_engine(args.python, progress=bars)
    except subprocess.CalledProcessError as e:
        sys.stderr.write(f"error: pip failed (exit {e.returncode}); its last lines:\n{e.output}\n")
        return 1
    except AgentGymError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    sys.stdout.write(f"the ALFWorld engine is installed: {' '.join(reqs)}\n")
    return 0


def _generate(args, parser) -> int:
    from .generate import generate

    if args.n < 0:
        parser.error("--n must be >= 0")
    try:
        paths = generate(args.out, args.n, args.seed, split=args.split, start=args.start,
                         families=tuple(args.family) if args.family else None)
    except AgentGymError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    sys.stdout.write(f"wrote {len(paths)} games under {Path(args.out) / args.split}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``agentgym alfworld setup [--python PY]`` | ``generate --out DIR --n N [--seed S] [--split NAME] [--start I]
    [--family F ...]``. ``argv`` is what follows ``agentgym alfworld``, as :func:`agentgym.cli.main` passes it."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "setup":
        return _setup(args)
    return _generate(args, parser)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
