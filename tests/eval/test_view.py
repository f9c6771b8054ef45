"""``agentgym view``: the static page of a real TextCraft eval, opened from a file in a real headless Chromium
(Debian's ``chromium``, driven by playwright with ``executable_path``, so nothing is downloaded): it loads with no
console errors, the filters narrow the list, an episode expands into its turns, and model responses carrying HTML /
script payloads are shown as text and never run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
from browser_kit import launch_chromium  # noqa: E402

from agentgym.cli import main
from agentgym.eval.grid import EvalGrid, run_grid
from agentgym.eval.view import build_page, page_data
from agentgym.registration import get_entry
from agentgym.rollout.policy import OraclePolicy, PolicyResponse

XSS = ('<img src=x onerror="window.__xss=1;document.title=\'pwned\'">'
       '</script><script>window.__xss=2</script><!-- {{DATA}} -->')


class HostilePolicy:
    """Plays TextCraft badly, with HTML/script payloads around its actions; fails for good on one task."""

    name = "hostile"

    def __call__(self, prompts, contexts=None):
        out = []
        for c in contexts:
            if c.task_id == "adapt.test.3" and c.turn == 1:
                out.append(RuntimeError(f"server said {XSS}"))
            elif c.turn % 2:
                out.append(f"<think>{XSS}</think>")  # no action tag: an invalid action
            else:  # with the request's usage record, as model-backed policies attach it
                out.append(PolicyResponse(f"<think>{XSS}</think><action>get 1 oak logs</action>",
                                          {"prompt_tokens": 1234, "completion_tokens": 56, "latency_s": 0.25}))
        return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    ok, why = get_entry("TextCraft-v0").split_available("adapt-test")
    if not ok:
        pytest.skip(f"TextCraft-v0 adapt-test is not available here: {why}")
    out = tmp_path_factory.mktemp("view") / "textcraft.jsonl"
    run_grid(EvalGrid(env_id="TextCraft-v0", split="adapt-test", first=6), OraclePolicy(), out)
    run_grid(EvalGrid(env_id="TextCraft-v0", split="adapt-test", first=6, seeds=(1,), max_turns=4),
             HostilePolicy(), out.with_name("hostile.jsonl"))
    return [out, out.with_name("hostile.jsonl")]


def test_page_data_summarizes_per_family_and_escapes_the_script_element(results):
    data = page_data(results)
    eps = data["episodes"]
    assert len(eps) == 12 and data["transcripts"] == 12
    assert {e["outcome"] for e in eps} == {"won", "lost", "error"}
    assert [e["error_kind"] for e in eps if e["outcome"] == "error"] == ["policy_error"]
    fams = {(s["family"], s["episodes"], s["errors"]) for s in data["summary"]}
    assert ("All", 6, 0) in fams and ("All", 5, 1) in fams
    assert all(isinstance(e["transcript"]["turns"][0]["prompt"], str) for e in eps if e["transcript"]["turns"])
    page = build_page(results)
    # the payload never appears raw: one data element and one script element, nothing else opens or closes one
    assert len(re.findall(r"<script", page, re.I)) == 2 and len(re.findall(r"</script", page, re.I)) == 2
    assert "<img" not in page and "\\u003cimg src=x" in page
    assert "\\u003c!-- {{DATA}} --\\u003e" in page  # a placeholder inside the data is left alone


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by playwright (tests/fuzz/browser_kit.py: skips without it, fails under
    AGENTGYM_REQUIRE_BROWSER=1, as .ci/run sets)."""
    with launch_chromium() as b:
        yield b


def test_view_page_in_headless_chromium(results, browser, tmp_path):
    from playwright.sync_api import expect

    out = tmp_path / "report.html"
    assert main(["view", *map(str, results), "--out", str(out), "--title", "TextCraft <b>eval</b>"]) == 0
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith("file:") else None)
    page.goto(out.as_uri())
    assert page.title() == "TextCraft <b>eval</b>"
    count = page.locator("#count")
    assert count.text_content() == "12 of 12 episodes"
    assert page.locator("table.summary tr").count() == 1 + len(page_data(results)["summary"])

    page.select_option("#f-outcome", "error")
    assert count.text_content() == "1 of 12 episodes"
    page.select_option("#f-outcome", "")
    page.select_option("#f-error", "policy_error")
    assert count.text_content() == "1 of 12 episodes"
    page.select_option("#f-error", "")
    page.select_option("#f-outcome", "won")
    assert count.text_content() == "6 of 12 episodes"
    page.select_option("#f-outcome", "lost")
    page.fill("#f-task", "adapt.test.1")
    assert count.text_content() == "1 of 12 episodes"
    page.fill("#f-task", "")
    assert count.text_content() == "5 of 12 episodes"

    episode = page.locator("details.episode:not([hidden])").first
    assert episode.locator(".turn").count() == 0  # built when opened
    episode.locator("summary").click()
    turns = episode.locator(".turn")
    # The transcript is built by the <details> "toggle" event, which the browser dispatches as a task after the
    # click: wait for it (bounded by playwright's default 5 s) instead of reading the page at once.
    expect(turns).to_have_count(4)
    first = turns.first
    assert first.locator("pre.response").text_content() == f"<think>{XSS}</think><action>get 1 oak logs</action>"
    assert "invalid action" in turns.nth(1).text_content()
    assert "usage: prompt_tokens 1234 · completion_tokens 56 · latency_s 0.250" in first.text_content()
    assert "tokens 2468 in / 112 out" in episode.text_content()  # the episode's two requests
    assert "prompt (as the policy saw it)" in first.text_content()
    assert page.evaluate("window.__xss") is None and page.title() == "TextCraft <b>eval</b>"
    assert page.locator("#episodes img").count() == 0 and page.locator("#episodes script").count() == 0

    page.select_option("#f-outcome", "error")
    errored = page.locator("details.episode:not([hidden])").first
    errored.locator("summary").click()
    expect(errored).to_contain_text("episode error (policy_error)")
    assert XSS in errored.text_content()
    page.screenshot(path=str(tmp_path / "view.png"), full_page=True)
    assert (tmp_path / "view.png").stat().st_size > 10_000
    assert problems == []


def _deep(levels: int, leaf="the-deepest-leaf"):
    value = leaf
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


class DeepUsagePolicy:
    """One valid action per turn, with a usage record that nests thousands of levels (a model server may send
    anything)."""

    name = "deep"

    def __call__(self, prompts, contexts=None):
        return [PolicyResponse("<action>inventory</action>", {"prompt_tokens": 1, "completion_tokens": 1,
                                                              "server_extra": _deep(5000)}) for _ in prompts]


def test_rows_of_any_depth_are_written_and_rendered_with_a_marker(tmp_path):
    from agentgym.eval.depth import DEPTH_MARKER, MAX_DEPTH, cap_depth
    from agentgym.eval.results import ResultsFile

    capped = cap_depth({"v": _deep(100_000)})  # iterative: no RecursionError at any depth
    node, levels = capped["v"], 1
    while isinstance(node, (list, dict)):
        node, levels = (node[0] if isinstance(node, list) else node["k"]), levels + 1
    assert node == DEPTH_MARKER and levels == MAX_DEPTH + 1
    assert cap_depth({"a": (1, 2), 3: {"b": None}}) == {"a": [1, 2], "3": {"b": None}}
    # the writer takes any row (cut at the shared limit), the viewer renders it
    ok, why = get_entry("TextCraft-v0").split_available("adapt-test")
    if not ok:
        pytest.skip(f"TextCraft-v0 adapt-test is not available here: {why}")
    out = tmp_path / "deep.jsonl"
    ResultsFile(tmp_path / "raw.jsonl").append([{"env_id": "x", "info": _deep(3000)}])
    assert DEPTH_MARKER in (tmp_path / "raw.jsonl").read_text()
    run_grid(EvalGrid(env_id="TextCraft-v0", split="adapt-test", episodes=2, max_turns=2), DeepUsagePolicy(), out)
    page = build_page([out])
    assert page.count(DEPTH_MARKER) >= 2 and "the-deepest-leaf" not in page
    assert main(["view", str(out), "--out", str(tmp_path / "deep.html")]) == 0
    # a line nested deeper than json can read (written by some other tool) is skipped, not a crash
    with open(out, "a", encoding="utf-8") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["view", str(out), "--out", str(tmp_path / "deep2.html")]) == 0
