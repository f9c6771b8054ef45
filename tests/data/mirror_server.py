"""A dataset mirror over HTTP on 127.0.0.1, for the tests and CI's no-staged-data stage (``.ci/no_shared_data.sh``).

It serves the files under ROOT (the layout of ``shared/data``) with ``GET``/``HEAD``, answers ``Range: bytes=N-``
with 206 and the rest of the file (416 past its end), and logs every request as a JSON line. Two faults can be
injected for the tests of ``agentgym data fetch``:

* ``--cut PATH=N``: the first response for PATH announces the whole length but sends only N bytes, then closes the
  connection (an interrupted download);
* ``--tamper PATH``: PATH is served with its first byte changed (a mirror whose copy is not the pinned one).

    python tests/data/mirror_server.py ROOT [--port 0] [--log FILE] [--cut PATH=N] [--tamper PATH]

prints ``http://127.0.0.1:PORT`` on its first line and serves until killed. :class:`MirrorServer` runs it in a thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class MirrorServer:
    """``with MirrorServer(root, cut={path: n}, tamper={path}) as m: m.url``; ``m.requests``: what was asked."""

    def __init__(self, root: str | Path, *, cut: dict[str, int] | None = None, tamper: set[str] | None = None,
                 log: str | Path | None = None, port: int = 0):
        self.root = Path(root).resolve()
        self.cut = dict(cut or {})
        self.tamper = set(tamper or ())
        self.log = Path(log) if log else None
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    def _record(self, entry: dict) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # requests go to the JSON log, not stderr
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                rel = unquote(urlsplit(self.path).path).lstrip("/")
                rng = self.headers.get("Range")
                server._record({"method": self.command, "path": rel, "range": rng})
                target = (server.root / rel).resolve()
                if not target.is_relative_to(server.root) or not target.is_file():
                    return self._plain(404, b"not found\n")
                data = target.read_bytes()
                if rel in server.tamper and data:
                    data = bytes([data[0] ^ 0x01]) + data[1:]
                start = 0
                if rng:
                    if not rng.startswith("bytes=") or not rng[6:].rstrip("-").isdigit() or not rng.endswith("-"):
                        return self._plain(400, b"only 'Range: bytes=N-' is supported\n")
                    start = int(rng[6:-1])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return None
                part = data[start:]
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                if not body:
                    return None
                cut = server.cut.pop(rel, None) if not rng else None
                if cut is not None:
                    self.wfile.write(part[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                self.wfile.write(part)
                return None

            def _plain(self, code: int, text: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        return Handler

    def __enter__(self) -> "MirrorServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", default=None, help="append one JSON line per request")
    p.add_argument("--cut", action="append", default=[], metavar="PATH=N")
    p.add_argument("--tamper", action="append", default=[], metavar="PATH")
    args = p.parse_args(argv)
    cut = {}
    for spec in args.cut:
        path, _, n = spec.rpartition("=")
        cut[path] = int(n)
    server = MirrorServer(args.root, cut=cut, tamper=set(args.tamper), log=args.log, port=args.port)
    print(server.url, flush=True)
    try:
        server.httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
