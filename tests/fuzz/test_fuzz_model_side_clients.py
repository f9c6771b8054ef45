"""The other clients of model servers, under the hostile servers of ``test_fuzz_eval_client.py`` (issue 33, rows
10-12): TauAirline's LLM user simulator (``OpenAIChat``) and SGCD's ``OpenAISummarizer`` send a bearer key too, so
they share the eval client's rules (``agentgym.net.bounded_request``): a redirect is never followed (the key goes to
no other origin) and fails as a typed error naming it, a dripped answer ends at the timeout, an endless one at the
cap. Servers on 127.0.0.1, every wait bounded."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from adapters.summarizers import EpisodeSummary, OpenAISummarizer, SummarizerError
from agentgym.envs.tau_airline.user import LLMUserConfig, OpenAIChat, UserSimulatorError
from agentgym.errors import EpisodeTimeoutError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policies"))
from openai_server import ScriptedServer, drip, flood, redirect  # noqa: E402

KEY = "sk-test-secret-0123456789"
ANSWER = b'{"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}'
EPISODE = EpisodeSummary(task="t", responses=["a"], observations=["o"], rewards=[0.0], valid=[True], won=False,
                         score=0.0)


def _user(srv: ScriptedServer, timeout_s: float = 2.0) -> OpenAIChat:
    return OpenAIChat(LLMUserConfig(model="m", base_url=srv.base_url, api_key=KEY, timeout_s=timeout_s,
                                    max_retries=0))


def _summarizer(srv: ScriptedServer, timeout_s: float = 2.0) -> OpenAISummarizer:
    return OpenAISummarizer(base_url=srv.base_url, model="m", api_key=KEY, timeout=timeout_s, retries=0)


def test_the_clients_answer_from_an_honest_server():
    with ScriptedServer(default="hello") as srv:
        assert _user(srv)([{"role": "user", "content": "hi"}]) == "hello"
        assert _summarizer(srv)(EPISODE) == "hello"


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_to_another_origin_is_never_followed(status):
    with ScriptedServer() as other:
        target = other.base_url + "/chat/completions"
        with ScriptedServer(hostile=lambda p, a: redirect(target, status)) as srv:
            with pytest.raises(UserSimulatorError, match=rf"HTTP {status} redirect to .*not followed"):
                _user(srv)([{"role": "user", "content": "hi"}])
            with pytest.raises(SummarizerError, match=rf"HTTP {status} .*not followed"):
                _summarizer(srv)(EPISODE)
            assert [r["auth"] for r in srv.log] == [f"Bearer {KEY}"] * 2
        assert other.log == []  # the key went nowhere else


def test_a_dripped_answer_ends_at_the_timeout():
    with ScriptedServer(hostile=lambda p, a: drip(ANSWER, 0.2)) as srv:  # ~15 s if read to the end
        t0 = time.monotonic()
        with pytest.raises(EpisodeTimeoutError):
            _user(srv, timeout_s=1.0)([{"role": "user", "content": "hi"}])
        with pytest.raises(SummarizerError, match="deadline|no complete answer"):
            _summarizer(srv, timeout_s=1.0)(EPISODE)
        assert time.monotonic() - t0 < 10.0  # two 1 s deadlines, with room for a loaded machine


def test_an_endless_answer_is_cut_at_the_cap():
    with ScriptedServer(hostile=lambda p, a: flood(1 << 30)) as srv:
        with pytest.raises(UserSimulatorError, match="too long"):
            _user(srv, timeout_s=30.0)([{"role": "user", "content": "hi"}])
        with pytest.raises(SummarizerError):
            _summarizer(srv, timeout_s=30.0)(EPISODE)
