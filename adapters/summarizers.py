"""Credit-reference summarizers for SGCD (the SGCD paper, arXiv 2606.12634): a short text about an episode that the
teacher pass sees as extra context, so that the teacher/student divergence marks the tokens the reference makes more
or less likely.

* :class:`RuleBasedSummarizer`: deterministic (same episode -> same text), no model; for tests and baselines.
* :class:`OpenAISummarizer`: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, llama.cpp,
  OpenAI), called with the standard library and a bounded timeout.

Both take an :class:`EpisodeSummary` and return a string.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from agentgym.errors import AgentGymError
from agentgym.net import MODEL_ANSWER_MAX_BYTES, ResponseTooLarge, bounded_request

logger = logging.getLogger(__name__)

__all__ = ["EpisodeSummary", "Summarizer", "RuleBasedSummarizer", "OpenAISummarizer", "SummarizerError"]


class SummarizerError(AgentGymError, RuntimeError):
    """The summarizer endpoint failed or answered something unusable."""

    kind = "summarizer"


@dataclass
class EpisodeSummary:
    """What a summarizer sees of one episode: the task text, each turn's response / observation / reward /
    validity, the outcome, and gold answers where the env exposes them (``info["golden_answers"]``)."""

    task: str
    responses: Sequence[str]
    observations: Sequence[str]
    rewards: Sequence[float]
    valid: Sequence[bool]
    won: bool
    score: float
    golden_answers: Sequence[str] = field(default_factory=tuple)


class Summarizer(Protocol):
    def __call__(self, episode: EpisodeSummary) -> str: ...


@dataclass
class RuleBasedSummarizer:
    """Deterministic reference: the outcome, the valid actions in order (at most ``max_actions``), the
    rewarded ones, and the gold answer when known. No randomness, no model."""

    max_actions: int = 8
    max_chars: int = 600

    def __call__(self, episode: EpisodeSummary) -> str:
        parts = [f"Outcome: {'success' if episode.won else 'failure'} (score {episode.score:.2f})."]
        valid = [r.strip() for r, ok in zip(episode.responses, episode.valid) if ok and r.strip()]
        if valid:
            parts.append("Valid actions: " + " | ".join(valid[:self.max_actions]) + ".")
        rewarded = [r.strip() for r, rew in zip(episode.responses, episode.rewards) if rew > 0]
        if rewarded:
            parts.append("Rewarded: " + " | ".join(rewarded[:self.max_actions]) + ".")
        invalid = sum(not ok for ok in episode.valid)
        if invalid:
            parts.append(f"{invalid} invalid action(s).")
        if episode.golden_answers:
            parts.append(f"Correct answer: {episode.golden_answers[0]}.")
        text = " ".join(parts)
        return text[:self.max_chars]


@dataclass
class OpenAISummarizer:
    """Summaries from an OpenAI-compatible chat endpoint (``{base_url}/chat/completions``).

    ``api_key`` is sent as a bearer token when given. Requests are bounded by ``timeout`` seconds and
    ``retries`` extra attempts; a failure raises :class:`SummarizerError` (never an empty reference).
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 30.0
    retries: int = 1
    max_tokens: int = 256
    temperature: float = 0.0
    system_prompt: str = ("You write a short credit reference for a finished agent episode: which steps mattered "
                          "for the outcome and what the correct approach is. At most 80 words.")

    def _messages(self, episode: EpisodeSummary) -> list[dict]:
        turns = "\n".join(f"Turn {k + 1}: action={r!r} valid={ok} reward={rew:g} observation={o[:300]!r}"
                          for k, (r, o, rew, ok) in enumerate(zip(episode.responses, episode.observations,
                                                                  episode.rewards, episode.valid)))
        gold = f"\nGold answer: {episode.golden_answers[0]}" if episode.golden_answers else ""
        user = (f"Task:\n{episode.task[-2000:]}\n\nEpisode:\n{turns}\n\nOutcome: "
                f"{'success' if episode.won else 'failure'} (score {episode.score:.2f}){gold}")
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]

    def __call__(self, episode: EpisodeSummary) -> str:
        body = json.dumps({"model": self.model, "messages": self._messages(episode),
                           "max_tokens": self.max_tokens, "temperature": self.temperature}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = self.base_url.rstrip("/") + "/chat/completions"
        last: Exception | None = None
        for _ in range(max(self.retries, 0) + 1):
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                # the whole request within the timeout, no redirect followed (the key stays with its origin), the
                # answer capped
                answer = bounded_request(req, timeout_s=self.timeout, max_bytes=MODEL_ANSWER_MAX_BYTES)
                if not 200 <= answer.status < 300:
                    raise SummarizerError(f"HTTP {answer.status} from {url}"
                                          + (f" (redirect to {answer.headers.get('Location')!r}, not followed)"
                                             if 300 <= answer.status < 400 else ""))
                data = json.loads(answer.body.decode("utf-8"))
                text = data["choices"][0]["message"]["content"]
                if not isinstance(text, str) or not text.strip():
                    raise SummarizerError(f"empty summary from {url}")
                return text.strip()
            except (urllib.error.URLError, TimeoutError, OSError, KeyError, IndexError, TypeError, ValueError,
                    ResponseTooLarge, SummarizerError) as e:  # ValueError: bad JSON or UTF-8
                last = e
                logger.warning("summarizer request to %s failed: %s", url, e)
        raise SummarizerError(f"summarizer endpoint {url} failed: {last}") from last
