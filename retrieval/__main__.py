"""``python -m retrieval build|serve|search ...`` (the same commands as ``agentgym retrieval ...``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m retrieval"))
