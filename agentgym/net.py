"""One way to open an HTTP request, shared by the clients of model endpoints (OpenAI-compatible policies, the
τ-airline LLM user, SGCD summarizers).

``urllib`` sends every request through the proxy named by ``http_proxy``/``https_proxy`` unless ``no_proxy`` lists the
host, and it has no built-in exception for loopback addresses. A model served on this machine (vLLM, SGLang, a test
server on 127.0.0.1) must never be reached through a proxy, so requests to a loopback host bypass proxies; every other
host keeps the environment's proxy settings.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["urlopen", "open_direct", "is_loopback_url"]

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxies, whatever the environment says


def is_loopback_url(url: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_direct(request: urllib.request.Request | str, timeout: float) -> Any:
    """Open ``request`` (a Request or a URL) directly, never through a proxy, whatever the host."""
    return _DIRECT.open(request, timeout=timeout)


def urlopen(request: urllib.request.Request, timeout: float) -> Any:
    """``urllib.request.urlopen`` that goes direct (never through a proxy) to loopback hosts."""
    if is_loopback_url(request.full_url):
        return _DIRECT.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)
