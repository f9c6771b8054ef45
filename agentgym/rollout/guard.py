"""Systemic failures: a run against a misconfigured model server stops within seconds instead of failing every
episode one by one.

The rule (:class:`SystemicFailureGuard`): watch the first ``window`` episodes that finish (default
:data:`DEFAULT_WINDOW`, fewer when the run has fewer). If every one of them failed at the policy with a *systemic*
error before getting a single answer (no turn played), the run stops with
:class:`~agentgym.errors.SystemicFailureError`, carrying the first failure's record and a hint. An error is systemic
when it says something about the endpoint, not about the episode (:func:`is_systemic`): a request answered
401, 403, 404 or 422 or a redirect (3xx, never followed: not retried, every episode's request fails the same way)
or a connection refused after its retries (nothing listens there). The first episode that finishes otherwise (played a turn, won, lost, or failed in
another way) ends the watch: later failures are the episodes' own and are recorded as usual.

The episodes that failed are handed to the caller's ``on_trajectory`` before the run stops, so their rows are
written and a rerun resumes the run like any other (errored episodes are played again).
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Callable

from ..errors import ErrorRecord, SystemicFailureError

__all__ = ["SystemicFailureGuard", "is_systemic", "hint_for", "SYSTEMIC_STATUS", "DEFAULT_WINDOW"]

#: HTTP statuses that fail every request of a run alike (auth, wrong URL or model, a rejected request body).
SYSTEMIC_STATUS = frozenset({401, 403, 404, 422})
#: Episodes watched at the start of a run.
DEFAULT_WINDOW = 8


def _fields(rec: ErrorRecord | dict | None) -> tuple[str, str, dict]:
    if rec is None:
        return "", "", {}
    if isinstance(rec, ErrorRecord):
        return rec.kind, rec.message, dict(rec.details or {})
    details = rec.get("details")
    return str(rec.get("kind", "")), str(rec.get("message", "")), dict(details) if isinstance(details, dict) else {}


def is_systemic(rec: ErrorRecord | dict | None) -> bool:
    """Whether an episode's error record (an :class:`ErrorRecord` or a results row's ``error`` dict) is a policy
    request that failed for a reason every request of the run shares (see the module doc)."""
    kind, _, details = _fields(rec)
    status = details.get("status")
    redirected = type(status) is int and 300 <= status < 400
    return kind == "policy_error" and (status in SYSTEMIC_STATUS or redirected or details.get("refused") is True)


def hint_for(rec: ErrorRecord | dict | None) -> str | None:
    """What to check for an episode's error record, or None when there is nothing specific to say."""
    kind, message, details = _fields(rec)
    if kind != "policy_error":
        return None
    status = details.get("status")
    url = message.split(": ", 1)[0] if message.startswith(("http://", "https://")) else ""
    if details.get("refused"):
        where = f" at {url.rsplit('/chat/completions', 1)[0]}" if url else ""
        return f"nothing accepts connections{where}: start the model server, or point --base-url at it"
    if status == 404:
        path = urllib.parse.urlsplit(url).path if url else ""
        if path.endswith("/chat/completions") and not path.endswith("/v1/chat/completions"):
            return ("the server has no " + path + ": an OpenAI-compatible base URL usually ends in /v1 "
                    "(e.g. --base-url http://127.0.0.1:8000/v1)")
        return "check --base-url (it usually ends in /v1) and the model name (openai:MODEL, as the server lists it)"
    if status in (401, 403):
        return ("the server refused the credentials: check the key in the variable named by --api-key-env "
                "(default OPENAI_API_KEY)")
    if status == 422:
        return "the server rejected the request: check the model name and the sampling flags (--max-tokens, ...)"
    if type(status) is int and 300 <= status < 400:
        return ("the server redirects its requests and redirects are never followed (the key would go along): "
                "point --base-url at the address it redirects to, if you trust it")
    if details.get("field") == "(body)" and "--max-response-bytes" in message:
        return "the server's answers are longer than --max-response-bytes: raise it if the server is trusted"
    if details.get("field"):
        return f"the server's answers are malformed at {details['field']}: is it an OpenAI-compatible server?"
    return None


class SystemicFailureGuard:
    """Watches finishing episodes (:meth:`observe`, or :meth:`wrap` around an ``on_trajectory`` callback) and raises
    :class:`~agentgym.errors.SystemicFailureError` by the rule of the module doc."""

    def __init__(self, window: int = DEFAULT_WINDOW):
        self.window = max(1, int(window))
        self.count = 0
        self.first: ErrorRecord | None = None
        self.watching = True

    def observe(self, trajectory: Any) -> None:
        if not self.watching:
            return
        err = getattr(trajectory, "error", None)
        if err is None or getattr(trajectory, "turns", None) or not is_systemic(err):
            self.watching = False
            return
        self.count += 1
        self.first = self.first or err
        if self.count >= self.window:
            self.watching = False
            rec = self.first.to_dict() if isinstance(self.first, ErrorRecord) else dict(self.first)
            hint = hint_for(rec)
            raise SystemicFailureError(
                f"stopped: the first {self.count} episode(s) all failed at the policy before any answer; the first "
                f"error: {rec.get('message', '')}" + (f"\nhint: {hint}" if hint else ""),
                first=rec, count=self.count, hint=hint)

    def wrap(self, on_trajectory: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """``on_trajectory`` (may be None) followed by :meth:`observe`: the caller records the episode first."""
        def observed(trajectory: Any) -> None:
            if on_trajectory is not None:
                on_trajectory(trajectory)
            self.observe(trajectory)
        return observed
