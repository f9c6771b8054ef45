"""Connection floods for the exhaustion tests, run as a child process so that its thousands of sockets use neither
the test process's file descriptors nor its GIL (the canary's latency is the server's, not the attacker's)::

    python tests/fuzz/flood_kit.py --port P --sockets 2124 --websockets 40 --seconds 20

opens ``--sockets`` TCP connections to 127.0.0.1:P that never send a byte, each reopened as soon as the server closes
it, and ``--websockets`` WebSocket sessions that complete the handshake and never send a frame (the library answers
the server's pings), each reopened when closed; prints ``ready`` once all are open (or after 30 s), then, after
its stdin closes (at most ``--seconds``), one JSON line of counts: sockets opened, closed by the server, the most open at once, and how many
of the closes came sooner than ``--quick-close-s`` (the server made room: its own idle deadline is later). Bounded:
every loop ends at the deadline, every connect has a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time


class Counts:
    def __init__(self):
        self.opened = self.closed = self.quick_closes = self.failed_connects = 0
        self.open_now = self.most_open = 0
        self.ws_opened = self.ws_closed = self.ws_failed = 0


async def _idle_socket(port: int, deadline: float, counts: Counts, quick_s: float) -> None:
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        except (OSError, asyncio.TimeoutError):
            counts.failed_connects += 1
            await asyncio.sleep(0.05)
            continue
        counts.opened += 1
        counts.open_now += 1
        counts.most_open = max(counts.most_open, counts.open_now)
        opened_at = time.monotonic()
        try:
            # b"" when the server closes (the process exits at the end: no timeout needed)
            await reader.read(1)
            counts.closed += 1
            counts.quick_closes += time.monotonic() - opened_at < quick_s
        except OSError:
            pass
        finally:
            counts.open_now -= 1
            writer.close()


async def _silent_websocket(port: int, deadline: float, counts: Counts) -> None:
    from websockets.asyncio.client import connect

    while time.monotonic() < deadline:
        try:
            async with connect(f"ws://127.0.0.1:{port}/ws", proxy=None, open_timeout=10) as ws:
                counts.ws_opened += 1
                await ws.wait_closed()
                counts.ws_closed += 1
        except Exception:  # noqa: BLE001 - refused or reset: try again (bounded by the deadline)
            counts.ws_failed += 1
            await asyncio.sleep(0.05)


async def main(args) -> dict:
    counts = Counts()
    deadline = time.monotonic() + args.seconds + 30  # a bound on every loop (the process exits before)
    tasks = [asyncio.ensure_future(_idle_socket(args.port, deadline, counts, args.quick_close_s))
             for _ in range(args.sockets)]
    tasks += [asyncio.ensure_future(_silent_websocket(args.port, deadline, counts)) for _ in range(args.websockets)]
    ready_by = time.monotonic() + 30
    while (counts.opened < args.sockets or counts.ws_opened < args.websockets) and time.monotonic() < ready_by:
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    # until the parent closes our stdin (its canary is done), or --seconds at most
    loop = asyncio.get_running_loop()
    stop = loop.run_in_executor(None, sys.stdin.read)
    await asyncio.wait({stop}, timeout=args.seconds)
    # no cancelling: the process exits (os._exit) and the kernel closes every socket at once
    return {k: v for k, v in vars(counts).items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sockets", type=int, default=1100)
    parser.add_argument("--websockets", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quick-close-s", type=float, default=2.0)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.sockets + args.websockets + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    # not asyncio.run, which cancels and awaits every task on the way out (a minute, with thousands of sockets)
    print(json.dumps(asyncio.new_event_loop().run_until_complete(main(args))), flush=True)
    import os

    os._exit(0)  # at once: no task to cancel, no socket to close one by one, no thread blocked on stdin to join
