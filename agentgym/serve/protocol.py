"""The OpenEnv wire protocol of ``agentgym serve``: error codes, message shapes (pydantic models, the shapes of
``openenv.core.env_server.types``) and the small helpers that build frames. See :mod:`agentgym.serve` for the
protocol itself."""

from __future__ import annotations

from typing import Any

from agentgym.errors import MissingDependencyError
from agentgym.jsonvalues import to_json_values

try:
    from pydantic import BaseModel, ConfigDict, Field, field_validator
except ModuleNotFoundError as e:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(e.name or "pydantic", "serve", "agentgym serve (the OpenEnv server)") from e

__all__ = ["SUPPORTED_OPENENV", "AgentGymAction", "AgentGymObservation", "AgentGymState", "ResetRequest",
           "StepRequest", "TaskQuery", "jsonable", "error_frame", "mcp_error", "validation_errors", "INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR",
           "CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"]

#: The openenv client versions this server is tested against (PyPI ``openenv``).
SUPPORTED_OPENENV = ("0.4.1", "0.10.0")

# OpenEnv's WSErrorCode values (openenv.core.env_server.types).
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
FACTORY_ERROR = "FACTORY_ERROR"
SESSION_ERROR = "SESSION_ERROR"


# ---- the wire models (the shapes of openenv.core.env_server.types) ------------------------------------------------
_INFO_DESCRIPTION = ("The env's info dict: the keys of agentgym.core.StepInfo (task_id, turn, obs_hash, action, "
                     "action_tag, action_key, action_valid, action_admissible, admissible_actions, process_ok, "
                     "invalid_reason, won, score, progress, error) plus the env's own (e.g. WebShop's page, "
                     "TauAirline's reward_info).")


def _info_schema() -> dict[str, Any]:
    from agentgym.core import INFO_TYPES

    names = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
             type(None): "null"}
    return {"properties": {k: {"type": [names[t] for t in ts]} for k, ts in INFO_TYPES.items()},
            "required": list(INFO_TYPES), "additionalProperties": True}


class AgentGymAction(BaseModel):
    """One step's action: the raw model response, parsed by the env as in-process ``env.step`` parses it."""

    model_config = ConfigDict(extra="forbid")

    action: str | dict[str, Any] = Field(
        ..., description="The raw model response, e.g. '<think>...</think><action>get 1 oak logs</action>' "
                         "(TauAirline also takes an OpenAI assistant message dict). A response the env cannot "
                         "parse is an invalid action (info.action_valid false), not an error.",
        examples=["<action>inventory</action>"])
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored by the env (OpenEnv's field).")


class AgentGymObservation(BaseModel):
    """What reset and step return (OpenEnv's ``Observation`` fields plus agentgym's)."""

    model_config = ConfigDict(extra="forbid")

    done: bool = Field(False, description="terminated or truncated")
    reward: float | None = Field(None, description="the step's reward (None on reset)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="OpenEnv's field; empty (see info)")
    text: str = Field(..., description="the env's observation")
    prompt: str = Field(..., description="the model-facing prompt of the new state (the env's prompt contract, "
                                         "history window included)")
    info: dict[str, Any] = Field(..., description=_INFO_DESCRIPTION, json_schema_extra=_info_schema())
    terminated: bool = Field(False, description="the task reached its natural end (won, or lost for good)")
    truncated: bool = Field(False, description="max_turns ran out first")


class AgentGymState(BaseModel):
    """A session's state (OpenEnv's ``State``: ``episode_id``, ``step_count``, extra fields allowed)."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = Field(0, ge=0)
    env_id: str
    split: str
    task_id: str | None = Field(None, description="the current episode's task (None before the first reset)")
    done: bool = Field(False, description="the current episode has ended (or none has started)")
    identity: dict[str, Any] = Field(default_factory=dict,
                                     description="the env's run identity (settings that change what scores mean)")
    task: dict[str, Any] = Field(default_factory=dict, description="the current task's metadata (family, depth...)")


#: The reset options that are task indexes: JSON integers only (``"3"`` and ``true`` are not indexes on the wire).
_INDEX_OPTIONS = ("task_index",)


class ResetRequest(BaseModel):
    """The fields of a reset (the ``data`` of a ``reset`` message, or the body of ``POST /reset``). Strict: a seed or
    an index is a JSON integer (``true``, ``"7"`` and ``7.0`` are refused, not converted)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    seed: int | None = Field(None, ge=0, lt=2**64, description="seeds the env's np_random (same seed and task, same "
                                                               "episode); 0 <= seed < 2**64")
    task_id: str | None = Field(None, description="the task to play (default: drawn with the env's np_random)")
    options: dict[str, Any] | None = Field(None, description="the env's reset options ({'task_id': ...}, ...)")
    episode_id: str | None = Field(None, max_length=255, description="default: a fresh UUID")

    @field_validator("options")
    @classmethod
    def _indexes_are_integers(cls, options: dict[str, Any] | None) -> dict[str, Any] | None:
        for key in _INDEX_OPTIONS:
            value = (options or {}).get(key)
            if key in (options or {}) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"options.{key} must be a JSON integer, got {type(value).__name__} {value!r:.40}")
        return options


class StepRequest(ResetRequest):
    """``POST /step``: stateless, so the reset fields come along (a fresh env is reset, then stepped once)."""

    action: dict[str, Any] = Field(..., description="an AgentGymAction object")
    timeout_s: float | None = Field(None, gt=0, description="at most the server's step timeout")
    request_id: str | None = Field(None, max_length=255)


class TaskQuery(BaseModel):
    """The body of the task API's POST routes (OpenEnv's ListTasksRequest, GetTaskRequest, GetTaskRangeRequest).
    Strict, like :class:`ResetRequest`: ``"3"`` is not an index."""

    model_config = ConfigDict(extra="forbid", strict=True)

    split: str
    index: int | None = None
    start: int | None = None
    stop: int | None = None


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (:mod:`agentgym.jsonvalues`); the wire format refuses unknown objects."""
    return to_json_values(obj, refuse_unknown=True)


def validation_errors(exc: Any) -> list[dict[str, Any]]:
    """A pydantic ``ValidationError``'s errors as JSON: each names its field (``loc``) and what is wrong (``msg``,
    ``type``); the offending input is left out (the client has it; it may be large)."""
    return jsonable(exc.errors(include_url=False, include_context=False, include_input=False))


def error_frame(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def mcp_error(request_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": -32601, "message": "agentgym environments expose no MCP tools: play them through "
                                                 "reset/step on the /ws session"}}
