"""The chat form of an env's prompt contract: tools, tool calls and messages for chat-template trainers.

agentgym envs take a raw text response and read its first well-formed action tag (:mod:`agentgym.parsing`). Chat
models trained with native tool calling (TRL's ``environment_factory``, SFT data with ``tool_calls``) need the same
episode as function calls instead. :class:`ChatForm` is that mapping, one per env, and both sides use it: the SFT
export (:mod:`agentgym.eval.export`) turns recorded responses into tool calls, and the TRL bridge
(:mod:`adapters.trl_env`) turns the model's tool calls back into the env's text actions, so an exported conversation
and a live rollout render the same tokens.

* **Text envs** (TextCraft, ALFWorld, WebShop, AppWorld, WikiSearch) get one tool, ``act``: its ``action`` argument
  is exactly the body the env would read from ``<action>...</action>``; envs with several tags (WikiSearch:
  ``search`` / ``answer``; AppWorld: ``code``) add a ``tag`` argument naming which (default: the first). A call
  ``act(action="get 1 oak logs")`` is stepped as ``<action>get 1 oak logs</action>``.
* **Tool envs** (TauAirline: :meth:`~agentgym.core.AgentEnv.native_tools`) expose their own tools by name, plus
  ``respond(message)`` for the text the env reads from ``<response>...</response>`` (in τ, a message to the user,
  whose reply comes back as the tool result). A call ``get_user_details(user_id="x")`` is stepped as
  ``<tool_call>{"name": "get_user_details", "arguments": {"user_id": "x"}}</tool_call>``.

The tool result is the env's observation, verbatim. Tool schemas (:meth:`ToolSpec.schema`) are written exactly as
``transformers.utils.get_json_schema`` renders the methods the TRL bridge builds from them (same keys, same order),
so a chat template renders an exported ``tools`` column and a live trainer's tools identically. Nested object
schemas (τ's ``flights``, ``passengers``...) cannot be expressed by Python type hints; their fields are described
in the argument's text instead.

This module is light (no transformers, no trl).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from typing import Any

from .parsing import text_around_first_tag

__all__ = ["ToolParam", "ToolSpec", "ChatForm", "chat_form", "env_class", "RESPOND_TOOL", "ACT_TOOL"]

ACT_TOOL = "act"
RESPOND_TOOL = "respond"
_PY_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


@dataclass(frozen=True)
class ToolParam:
    """One argument of a tool: its JSON type (``items``: the JSON type of an array's items), description, whether
    it is required (an optional one defaults to None) and its allowed values."""

    name: str
    type: str
    description: str
    required: bool = True
    enum: tuple | None = None
    items: str | None = None

    def __post_init__(self) -> None:
        if self.type not in _PY_TYPES or (self.items is not None and self.items not in _PY_TYPES):
            raise ValueError(f"unsupported JSON type for tool argument {self.name!r}: {self.type}/{self.items}")

    def py_type(self) -> Any:
        """The Python type hint ``get_json_schema`` turns into this argument's schema."""
        from typing import Literal

        if self.enum:
            return Literal[tuple(self.enum)]  # type: ignore[valid-type]
        if self.type == "array" and self.items is not None:
            return list[_PY_TYPES[self.items]]  # type: ignore[index]
        return _PY_TYPES[self.type]

    def schema(self) -> dict:
        if self.enum:
            kinds = list(dict.fromkeys(_json_type(v) for v in self.enum))
            out: dict = {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(self.enum)}
        else:
            out = {"type": self.type}
            if self.type == "array" and self.items is not None:
                out["items"] = {"type": self.items}
        out["description"] = self.description
        return out


def _json_type(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}[type(v)]


@dataclass(frozen=True)
class ToolSpec:
    """A tool: name, description, arguments."""

    name: str
    description: str
    params: tuple[ToolParam, ...] = ()

    def schema(self) -> dict:
        """The OpenAI-format function schema, exactly as ``transformers.utils.get_json_schema`` renders a function
        built from this spec."""
        params: dict = {"type": "object", "properties": {p.name: p.schema() for p in self.params}}
        required = [p.name for p in self.params if p.required]
        if required:
            params["required"] = required
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}

    def docstring(self) -> str:
        """A Google-style docstring ``get_json_schema`` parses back into :meth:`schema`."""
        lines = [self.description]
        if self.params:
            lines += ["", "Args:"] + [f"    {p.name}: {' '.join(p.description.split())}" for p in self.params]
        return "\n".join(lines)


def _spec_from_openai(tool: dict) -> ToolSpec:
    fn = tool.get("function", tool)
    props = (fn.get("parameters") or {}).get("properties") or {}
    required = set((fn.get("parameters") or {}).get("required") or ())
    params = []
    for name, p in props.items():
        desc = " ".join(str(p.get("description", name)).split())
        items = None
        kind = p.get("type", "string")
        if kind == "array":
            item = p.get("items") or {}
            items = item.get("type", "string")
            if items == "object" and item.get("properties"):
                fields = ", ".join(f"{k} ({v.get('type', 'any')})" for k, v in item["properties"].items())
                desc += f" Each item is an object with the fields: {fields}."
        elif kind == "object" and p.get("properties"):
            fields = ", ".join(f"{k} ({v.get('type', 'any')})" for k, v in p["properties"].items())
            desc += f" An object with the fields: {fields}."
        if "minimum" in p:
            desc += f" Minimum {p['minimum']}."
        enum = tuple(p["enum"]) if p.get("enum") else None
        params.append(ToolParam(name, kind, desc, name in required, enum, items))
    return ToolSpec(fn["name"], " ".join(str(fn.get("description", fn["name"])).split()), tuple(params))


@dataclass(frozen=True)
class ChatForm:
    """How one env's episodes look as tool calls (see the module docstring)."""

    env_id: str
    action_tags: tuple[str, ...]
    tools: tuple[ToolSpec, ...]
    native: bool  # the env's own tools (τ) rather than the act tool
    system: str = field(repr=False, default="")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def tool_schemas(self) -> list[dict]:
        return [t.schema() for t in self.tools]

    def tool(self, name: str) -> ToolSpec:
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(f"{self.env_id} has no tool {name!r}; tools: {', '.join(self.tool_names)}")

    # ---- tool call -> the env's text action (the TRL bridge) --------------------------------------------------
    def action_text(self, name: str, arguments: dict) -> str:
        """The raw response the env steps for the tool call ``name(**arguments)``."""
        if not self.native:
            if name != ACT_TOOL:
                raise KeyError(f"{self.env_id} has only the {ACT_TOOL!r} tool, not {name!r}")
            tag = arguments.get("tag") or self.action_tags[0]
            if tag not in self.action_tags:
                raise ValueError(f"tag must be one of {list(self.action_tags)}, got {tag!r}")
            return f"<{tag}>{arguments.get('action', '')}</{tag}>"
        if name == RESPOND_TOOL:
            return f"<response>{arguments.get('message', '')}</response>"
        self.tool(name)  # an unknown name is the caller's error, not an env step
        args = {k: v for k, v in arguments.items() if v is not None}  # optional arguments the model left out
        return f"<tool_call>{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}</tool_call>"

    # ---- recorded response -> tool call (the SFT export) ------------------------------------------------------
    def tool_call(self, info: dict) -> dict | None:
        """The tool call a recorded step stands for (from its info's parsed ``action`` and ``action_tag``), as
        ``{"type": "function", "function": {"name": ..., "arguments": {...}}}``; None when nothing parsed or the
        parsed body is not a call of one of this form's tools."""
        body, tag = info.get("action"), info.get("action_tag")
        if not isinstance(body, str) or tag not in self.action_tags:
            return None
        if not self.native:
            args = {"action": body}
            if len(self.action_tags) > 1:
                args["tag"] = tag
            return {"type": "function", "function": {"name": ACT_TOOL, "arguments": args}}
        if tag == "response":
            return {"type": "function", "function": {"name": RESPOND_TOOL, "arguments": {"message": body}}}
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, nested too deep, a number past the digit limit
            return None
        if isinstance(obj, dict) and isinstance(obj.get("function"), dict):  # OpenAI's nesting
            obj = obj["function"]
        if not isinstance(obj, dict) or obj.get("name") not in self.tool_names:
            return None
        args = obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):
                return None
        if not isinstance(args, dict):
            return None
        return {"type": "function", "function": {"name": obj["name"], "arguments": args}}

    def assistant_message(self, response: str, info: dict, *, arguments_as_json: bool = True) -> dict:
        """A recorded response as an assistant message: the reasoning around the tag as ``content`` plus one
        ``tool_calls`` entry, or the whole response as ``content`` when it makes no call. ``arguments_as_json``:
        the arguments as a JSON string (OpenAI's wire format; keeps a ``datasets`` column uniform across tools)."""
        call = self.tool_call(info)
        if call is None:
            return {"role": "assistant", "content": response}
        if arguments_as_json:
            fn = call["function"]
            call = {"type": "function", "function": {"name": fn["name"],
                                                     "arguments": json.dumps(fn["arguments"], ensure_ascii=False)}}
        return {"role": "assistant", "content": text_around_first_tag(response, self.action_tags),
                "tool_calls": [call]}


def env_class(env_id: str) -> type:
    """The env class of a registered id (imported, not instantiated)."""
    from .registration import get_entry

    module, _, name = get_entry(env_id).entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


def _system_text(tags: tuple[str, ...], native: bool) -> str:
    if native:
        return ("You act only by calling the tools, one call per turn. To speak to the user, call "
                f"`{RESPOND_TOOL}` with your message (what you would otherwise write inside <response>...</response>); "
                "its result is the user's reply. Any other tool call does what the <tool_call> format describes, and "
                "its result is the tool's output. You may reason before the call.")
    if len(tags) == 1:
        return (f"You act in the environment only by calling the `{ACT_TOOL}` tool, one call per turn: its `action` "
                f"argument is exactly what you would otherwise write inside <{tags[0]}>...</{tags[0]}>, and its "
                "result is the environment's next observation. You may reason before the call.")
    kinds = ", ".join(f"<{t}>" for t in tags)
    return (f"You act in the environment only by calling the `{ACT_TOOL}` tool, one call per turn: its `tag` "
            f"argument names the kind of action ({kinds}) and its `action` argument is exactly what you would "
            "otherwise write inside that tag; its result is the environment's next observation. You may reason "
            "before the call.")


def chat_form(env_id: str) -> ChatForm:
    """The :class:`ChatForm` of a registered env id."""
    cls = env_class(env_id)
    tags = tuple(getattr(cls, "action_tags", ("action",)))
    native = cls.native_tools()
    if native:
        respond = ToolSpec(RESPOND_TOOL, "Send a message to the user and get the user's reply. Send ###STOP### to end "
                                         "the conversation.",
                           (ToolParam("message", "string", "The message to the user."),))
        tools = tuple(_spec_from_openai(t) for t in native) + (respond,)
        return ChatForm(env_id, tags, tools, True, _system_text(tags, True))
    params = [ToolParam("action", "string", f"The command, exactly as you would write it inside "
                                             f"<{tags[0]}>...</{tags[0]}>" + (" or the other tag." if len(tags) > 1
                                                                              else "."))]
    if len(tags) > 1:
        params.append(ToolParam("tag", "string", f"The kind of action: the tag you would put it in (default "
                                                 f"{tags[0]}).", required=False, enum=tags))
    act = ToolSpec(ACT_TOOL, f"Take one action in the {env_id.split('-')[0]} environment and return the "
                             "environment's next observation.", tuple(params))
    return ChatForm(env_id, tags, (act,), False, _system_text(tags, False))
