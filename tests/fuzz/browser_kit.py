"""Headless Chromium for the attacks a web page can make on a loopback server (no-cors requests, DNS rebinding).

Debian's ``chromium`` (``/usr/bin/chromium``, or ``$AGENTGYM_CHROMIUM``) driven by playwright from the venv with
``executable_path``, so nothing is downloaded; ``.ci/run`` installs it and sets ``AGENTGYM_REQUIRE_BROWSER=1``, and
then a missing browser fails the test instead of skipping it (the convention of ``tests/eval/test_view.py``).

* :func:`launch_chromium` -- a browser whose resolver maps :data:`REBIND_HOST` to 127.0.0.1 (what an attacker's DNS
  does after the page has loaded), with the browser's own Local/Private Network Access checks off, so that what
  stops a request is the server's rules, not the browser's;
* :class:`PageServer` -- a plain HTTP server on another port of 127.0.0.1: it serves the attacker's page and records
  every request it gets (to show what a browser actually sends);
* :func:`open_page_as` -- a page whose document URL is any origin (``http://rebind.evil.example:PORT/``), its HTML
  served by playwright's router, while the page's own requests go to the network: the state of a page after a DNS
  rebinding.
* :data:`FETCH_JS` -- one ``fetch`` with the given init (a Blob body included), resolving to what the page could see;
* :data:`ATTACK_JS` -- everything a page may try on a server (``agentgym serve``): a ``no-cors`` POST with a text
  body, a ``no-cors`` POST with a JSON Blob, a readable (CORS) POST, and a WebSocket session.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

#: The attacker's host name; the browser resolves it to 127.0.0.1.
REBIND_HOST = "rebind.evil.example"

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 f"--host-resolver-rules=MAP {REBIND_HOST} 127.0.0.1",
                 # Chromium's own guards against public pages calling local addresses: off, so that the server's
                 # rules are what the tests see (older browsers, and other browsers, have no such guard)
                 "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,"
                 "PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests"]


def chromium_path() -> str | None:
    exe = os.environ.get("AGENTGYM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return exe if Path(exe).exists() else None


@contextlib.contextmanager
def launch_chromium():
    """A headless Chromium (playwright ``Browser``) for the duration of the block; skips (or, with
    ``AGENTGYM_REQUIRE_BROWSER=1``, fails) when Chromium or playwright is missing."""
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


class PageServer:
    """An HTTP server on 127.0.0.1 (a port of its own) that answers every GET with ``html`` and records every
    request as (method, path, headers with lowercased names, body); a POST gets an empty 204."""

    def __init__(self, html: str):
        self.html = html.encode()
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(n, 1 << 20)) if n else b""
                owner.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                       body))
                return body

            def do_GET(self):  # noqa: N802 - the stdlib's naming
                self._record()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(owner.html)))
                self.end_headers()
                self.wfile.write(owner.html)

            def do_POST(self):  # noqa: N802
                self._record()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):  # quiet
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "PageServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


def open_page_as(browser, url: str, html: str):
    """A new page whose document is ``html`` at ``url`` (any origin: the router answers the navigation, nothing is
    fetched for it); the page's own requests go to the network. The caller closes the page's context."""
    context = browser.new_context()
    context.route(url, lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    page = context.new_page()
    page.goto(url)
    return page


#: A script for ``page.evaluate``: ``fetch`` of ``args.url`` with ``args.init`` (a ``body`` given as
#: ``{"blob": text, "type": mime}`` becomes a Blob); resolves to ``{type, status, text}`` of the response (``text``
#: empty when the page may not read it), or ``{error}`` when the fetch failed.
FETCH_JS = """async (args) => {
  const init = Object.assign({}, args.init);
  if (init.body && typeof init.body === 'object') {
    init.body = new Blob([init.body.blob], init.body.type === null ? {} : {type: init.body.type});
  }
  try {
    const r = await fetch(args.url, init);
    let text = '';
    try { text = await r.text(); } catch (e) {}
    return {type: r.type, status: r.status, text: text};
  } catch (e) {
    return {error: String(e)};
  }
}"""


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
