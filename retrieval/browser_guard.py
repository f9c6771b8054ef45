"""Who may drive a loopback server from a web browser: the Host, Origin and Content-Type rules of the retrieval server
(and meant for ``agentgym serve`` too: this package is below ``agentgym``, so both can import it).

A page open in a local browser can reach 127.0.0.1 in three ways, and each rule here closes one:

* **A cross-origin "simple" request** -- ``fetch(url, {mode: "no-cors", method: "POST", body: blob})``: the browser
  sends it without asking the server first (no CORS preflight) when its ``Content-Type`` is ``text/plain``, a form
  or multipart, and although the page cannot read the answer, the server has acted on it. Rule: a POST body must be
  declared ``application/json`` (:func:`is_json_content_type`), which a page can only send after a preflight these
  servers never grant; and a request whose ``Origin`` is neither the server's own nor an allowed one is refused.
* **DNS rebinding** -- the page's own host name is re-resolved to 127.0.0.1, so to the browser its requests are
  same-origin and it may read the answers; but their ``Host`` header still names the attacker's domain. Rule
  (:func:`host_allowed`), applied when the server has no token: the ``Host`` must name a loopback address
  (``127.0.0.1``, ``localhost``, ``[::1]``...) or the address the connection was made to, with the server's port;
  or the host and port of an allowed origin.
* **A WebSocket** from any page (browsers send ``Origin`` but apply no CORS to WebSockets): the Origin rule.

A bearer token closes all three (a page cannot attach one without a preflight), so with a token only the Origin
rule applies. :class:`BrowserGuard` is the ASGI middleware that applies the Host and Origin rules to every HTTP
request and WebSocket upgrade (JSON 403, or a refused handshake); the Content-Type rule belongs to the routes that
take a body (a wrong method or path keeps its 405 / 404).

Nothing here imports a web framework; :func:`origin_allowed` is the same rule as ``agentgym serve``'s WebSocket
origin check.
"""

from __future__ import annotations

import json
from typing import Iterable
from urllib.parse import urlsplit

__all__ = ["BrowserGuard", "host_allowed", "origin_allowed", "is_json_content_type", "split_host",
           "normalize_origins", "is_loopback_host"]


def is_json_content_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` value declares JSON (``application/json`` or ``application/*+json``, any
    parameters). None (no header) is not JSON: a browser's no-cors request can send no header at all."""
    if content_type is None:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def split_host(value: str) -> tuple[str, int | None] | None:
    """(host name, port or None) of a ``Host`` header value, the name lowercased and without IPv6 brackets; None
    when the value is not ``name``, ``name:port``, ``[v6]`` or ``[v6]:port``."""
    value = value.strip().lower()
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            return None
        name, rest = value[1:close], value[close + 1:]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else None
    else:
        name, sep, port = value.partition(":")
        if not sep:
            port = None
        elif ":" in port:  # an IPv6 address without brackets
            return None
    if not name or any(c.isspace() or c in "/@\\?#" for c in name):
        return None
    if port is None:
        return name, None
    if not port.isdigit() or len(port) > 5 or not 0 < int(port) < 65536:
        return None
    return name, int(port)


def normalize_origins(origins: Iterable[str]) -> frozenset[str]:
    """``scheme://host[:port]`` values, lowercased and without a trailing slash; ValueError naming a value that is
    not one (a path, no host, a scheme other than http/https)."""
    out = set()
    for origin in origins:
        o = origin.strip().rstrip("/").lower()
        parts = urlsplit(o)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or \
                parts.fragment or parts.username is not None:
            raise ValueError(f"an allowed origin must be scheme://host[:port] (http or https), got {origin!r}")
        try:
            parts.port
        except ValueError:
            raise ValueError(f"an allowed origin has a bad port: {origin!r}") from None
        out.add(o)
    return frozenset(out)


def _origin_names(origin: str, port: int | None) -> tuple[str, bool]:
    """(the origin's host name, whether ``port`` -- a Host header's, None when it names none -- is its port)."""
    parts = urlsplit(origin)
    default = 443 if parts.scheme == "https" else 80
    return (parts.hostname or ""), (port if port is not None else default) == (parts.port or default)


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` (browsers resolve ``*.localhost`` to loopback themselves) and loopback addresses
    (127.0.0.0/8, ``::1``, with or without IPv6 brackets); False for ``0.0.0.0``, ``::`` and the rest."""
    import ipaddress

    host = host.strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(host: str | None, server_port: int, allowed_origins: Iterable[str] = (),
                 local_address: str | None = None) -> bool:
    """The Host rule (see the module docstring): True when ``host`` (the header's value; None when absent, which no
    browser does) names a loopback address or ``local_address`` (the address the connection was made to) with
    ``server_port`` (no port: 80), or is the host and port of one of ``allowed_origins`` (normalized, see
    :func:`normalize_origins`)."""
    if host is None:
        return True  # HTTP/1.0 without Host: not a browser (every browser sends one)
    parsed = split_host(host)
    if parsed is None:
        return False
    name, port = parsed
    for origin in allowed_origins:
        o_name, same_port = _origin_names(origin, port)
        if name == o_name and same_port:
            return True
    if (port or 80) != server_port:
        return False
    if local_address and name == local_address.strip("[]").lower():
        return True
    return is_loopback_host(name)


def origin_allowed(origin: str | None, host: str | None, allowed_origins: Iterable[str] = ()) -> bool:
    """The Origin rule, as ``agentgym serve`` applies it to WebSocket upgrades: no ``Origin`` (not a browser, or a
    same-origin GET), one of ``allowed_origins`` (normalized), or the server's own origin (``http(s)://`` + the
    ``Host`` header)."""
    if origin is None:
        return True
    o = origin.strip().rstrip("/").lower()
    if o in allowed_origins:
        return True
    h = (host or "").strip().lower()
    return bool(h) and o in (f"http://{h}", f"https://{h}")


class BrowserGuard:
    """ASGI middleware: every HTTP request and WebSocket upgrade must pass the Origin rule, and, when
    ``check_host`` (the server has no token), the Host rule; others get a JSON 403 naming the header (``error_key``
    holds the message) or a refused handshake. ``allowed_origins``: extra ``scheme://host[:port]`` values a browser
    page may come from (normalized here; ValueError for a malformed one). The server's port and the address the
    connection was made to come from the ASGI scope (``scope["server"]``), so the guard needs no configuration of
    its own."""

    def __init__(self, app, *, check_host: bool, allowed_origins: Iterable[str] = (), error_key: str = "error"):
        self.app, self.check_host, self.error_key = app, check_host, error_key
        self.allowed_origins = normalize_origins(allowed_origins)

    def refusal(self, scope) -> str | None:
        """Why the request of ``scope`` is refused, or None."""
        host = origin = None
        for name, value in scope.get("headers") or ():
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        if self.check_host:
            server = scope.get("server") or (None, None)
            if server[1] is not None and not host_allowed(host, int(server[1]), self.allowed_origins, server[0]):
                return (f"Host {host!r} is not this server's loopback address: without a token only 127.0.0.1, "
                        "localhost or [::1] with the server's port (or an --allowed-origin's host) are answered")
        if not origin_allowed(origin, host, self.allowed_origins):
            return (f"Origin {origin!r} is not allowed: a web page may not drive this server (pass "
                    "--allowed-origin to allow one)")
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        why = self.refusal(scope)
        if why is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
        body = json.dumps({self.error_key: why}).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
