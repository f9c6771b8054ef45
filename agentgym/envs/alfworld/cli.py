"""``agentgym alfworld setup|generate|check-distinct``: install the ALFWorld engine with a progress bar
(:mod:`.install`), write expert-verified games in the official layout (:mod:`.generate`), and check that no two
games of the generated split can be the same game."""

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
    c = sub.add_parser("check-distinct", description="Check that no two games of a range can be the same game: "
                                                     "every scene the generator may keep for one index (each "
                                                     "feasible attempt) against every one of the others, by "
                                                     "identity (family, goal, room, receptacles, objects). Runs "
                                                     "no expert; exit 1 when two could repeat.",
                       help="check that no two generated games of a range can repeat one another")
    c.add_argument("--n", type=int, required=True, help="number of games")
    c.add_argument("--seed", type=int, default=None, help="generator seed (default: the generated split's)")
    c.add_argument("--start", type=int, default=0, help="first game index (default: 0)")
    return parser


def _check_distinct(args, parser) -> int:
    from .generate import GENERATED_SEED, find_repeated_games

    if args.n < 0:
        parser.error("--n must be >= 0")
    seed = GENERATED_SEED if args.seed is None else args.seed

    def progress(done: int) -> None:
        if done % 1000 == 0:
            sys.stderr.write(f"{done}/{args.n} games checked\n")

    check = find_repeated_games(seed, args.n, args.start, progress)
    span = f"games {args.start}..{args.start + args.n - 1} of seed {seed}"
    if check.repeats:
        for i, a, j, b in check.repeats[:20]:
            sys.stdout.write(f"game {i} (attempt {a}) could repeat game {j} (attempt {b})\n")
        sys.stdout.write(f"{span}: {len(check.repeats)} pair(s) of candidate scenes share an identity\n")
        return 1
    sys.stdout.write(f"{span}: {check.candidates} candidate scenes (every attempt the generator may keep), "
                     f"{check.identities} identities; no two games can be the same game\n")
    return 0


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
    [--family F ...]`` | ``check-distinct --n N [--seed S] [--start I]``. ``argv`` is what follows
    ``agentgym alfworld``, as :func:`agentgym.cli.main` passes it."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "setup":
        return _setup(args)
    if args.command == "check-distinct":
        return _check_distinct(args, parser)
    return _generate(args, parser)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
