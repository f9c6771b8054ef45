"""``agentgym webshop prepare``: build WebShop's title-noun table with spaCy (data-preparation time).

    agentgym webshop prepare [--data DIR] [--model NAME_OR_PATH] [--out FILE] [--force] [--no-verify]

The env reads this table and never runs spaCy (:mod:`.catalog`); build it once where the staged copy is absent,
e.g. with only the official download in ``$WEBSHOP_DATA``. Needs ``pip install -e ".[webshop-nlp]"``.
"""

from __future__ import annotations

import argparse
import sys

from ...errors import AgentGymError
from .catalog import prepare_noun_table

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentgym webshop", description="WebShop data preparation")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the title-noun table of the type reward with spaCy (cached)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="the official WebShop files (default: $WEBSHOP_DATA, else the processed catalogue)")
    p.add_argument("--model", default=None, help="spaCy model name or path (default: en_core_web_sm)")
    p.add_argument("--out", default=None, metavar="FILE", help="where to write it (default: the agentgym cache)")
    p.add_argument("--force", action="store_true", help="rebuild an existing table")
    p.add_argument("--no-verify", action="store_true", help="skip the official files' hash check")
    args = parser.parse_args(argv)
    try:
        path = prepare_noun_table(args.data, model=args.model, out=args.out, force=args.force,
                                  verify=not args.no_verify)
    except AgentGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"WebShop noun table: {path}")
    return 0
