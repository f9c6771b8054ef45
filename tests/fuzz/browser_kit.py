"""Headless Chromium as a hostile web page, for the tests that check a loopback server cannot be driven from a
browser (``agentgym serve``, the retrieval server).

Debian's ``chromium`` (``/usr/bin/chromium``, or ``$AGENTGYM_CHROMIUM``) driven by playwright with
``executable_path``, so nothing is downloaded; without it the tests skip, unless ``AGENTGYM_REQUIRE_BROWSER=1``
(``.ci/run`` sets it) makes them fail. Chromium maps :data:`REBIND_HOST` to 127.0.0.1 (``--host-resolver-rules``):
a page served from ``http://rebind.test:PORT`` is what a DNS-rebinding attack looks like to the server -- same
origin, its own name in ``Host``. Chromium's own local-network protections are switched off, so that what refuses
the page is the server under test, not the browser (the tests check the server saw each request).

* :func:`chromium` -- a pytest-friendly context manager yielding a launched browser.
* :class:`StaticSite` -- a page served by a plain HTTP server on another 127.0.0.1 port (a site elsewhere).
* :func:`open_page` -- a page at any URL, its HTML supplied by the test (playwright route), so a page can claim the
  server's own origin (rebinding) without the server serving it.
* :data:`ATTACK_JS` -- what the page tries: a ``no-cors`` POST with a text body, a ``no-cors`` POST with a JSON
  Blob, a readable (CORS) POST, and a WebSocket session; it returns what it could observe.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

REBIND_HOST = "rebind.test"

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 f"--host-resolver-rules=MAP {REBIND_HOST} 127.0.0.1",
                 # the browser's own guards (Private/Local Network Access) off: the server must refuse on its own
                 "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,"
                 "PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests"]


def chromium_path() -> str | None:
    exe = os.environ.get("AGENTGYM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return exe if Path(exe).exists() else None


@contextlib.contextmanager
def chromium():
    """A headless Chromium (playwright's ``Browser``); skips the test without one, fails it under
    ``AGENTGYM_REQUIRE_BROWSER=1``."""
    exe = chromium_path()
    require = os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1"
    if exe is None:
        if require:
            pytest.fail("AGENTGYM_REQUIRE_BROWSER=1 but no Chromium at /usr/bin/chromium")
        pytest.skip("no Chromium (apt-get install chromium) for the browser test")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if require:
            raise
        pytest.skip("playwright is not installed (the 'test' extra has it)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


class StaticSite:
    """``html`` at ``http://127.0.0.1:PORT/`` (``url``), served by the standard library in a thread: a page on
    another port. A context manager."""

    def __init__(self, html: str):
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the standard library's name
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "StaticSite":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)


def open_page(browser, url: str, html: str = "<!doctype html><title>page</title>"):
    """A new page at ``url`` whose HTML is ``html``, answered by the browser itself (only that URL; the page's own
    requests go to the network). The caller closes the page's context (``page.context.close()``)."""
    context = browser.new_context()
    context.route(url, lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    page = context.new_page()
    page.goto(url, timeout=30_000)
    return page


#: ``(target) => {...}``: every way a page may try to use the server at ``target`` (``http://host:port``); returns
#: what it observed. ``nocors*``: "sent" when the browser sent the request (its answer is opaque either way);
#: ``cors``: the status the page could read, or "blocked"; ``ws``: "open: <first frame>", or how it failed.
ATTACK_JS = """
async ({target, resetBody}) => {
  const out = {};
  try { await fetch(target + "/reset", {method: "POST", mode: "no-cors", body: resetBody}); out.nocors = "sent"; }
  catch (e) { out.nocors = "error: " + e; }
  try {
    await fetch(target + "/reset", {method: "POST", mode: "no-cors",
                                    body: new Blob([resetBody], {type: "application/json"})});
    out.nocors_blob = "sent";
  } catch (e) { out.nocors_blob = "error: " + e; }
  try {
    const r = await fetch(target + "/reset", {method: "POST", headers: {"Content-Type": "application/json"},
                                              body: resetBody});
    out.cors = r.status;
    out.cors_body = (await r.text()).slice(0, 200);
  } catch (e) { out.cors = "blocked"; }
  out.ws = await new Promise((resolve) => {
    let ws;
    const timer = setTimeout(() => resolve("timeout"), 20000);
    try { ws = new WebSocket(target.replace(/^http/, "ws") + "/ws"); }
    catch (e) { clearTimeout(timer); resolve("error: " + e); return; }
    ws.onopen = () => ws.send(JSON.stringify({type: "reset", data: JSON.parse(resetBody)}));
    ws.onmessage = (m) => { clearTimeout(timer); resolve("open: " + String(m.data).slice(0, 80)); ws.close(); };
    ws.onerror = () => { clearTimeout(timer); resolve("error"); };
    ws.onclose = (e) => { clearTimeout(timer); resolve("closed " + e.code); };
  });
  return out;
}
"""
