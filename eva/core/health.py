# Whether a bot process is alive and ready, and the few bytes of HTTP that say so to an
# orchestrator's probes (Kubernetes' httpGet liveness and readiness probes).
#
# Pure: the state of the shards, the store and the stop come in as values, and request
# bytes in give response bytes out; no socket, clock or hikari here (the shell is
# eva.discord.health). Liveness is answered by the shell's loop answering at all: a loop
# that stopped turning never answers, and the probe's timeout says so.
# Invariants: ready only when every shard the process runs is connected, the store is open
# and no stop was asked for; every answer closes its connection and says why in plain text;
# anything but GET or HEAD of the two paths is refused with its status, never served.
#
# A probe counts a status from 200 to 399 as success and anything else (or no answer
# within timeoutSeconds) as failure (kubernetes/kubernetes pkg/probe/http, DoHTTPProbe:
# "400 > code >= 200"; checked 2026-12-07).
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LIVE_PATH = "/livez"
READY_PATH = "/readyz"
HEAD_LIMIT = 8192
"""The most bytes of a request's head read; a longer head is refused."""

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class Health:
    """A probe's answer: whether it passes, and a line per thing checked."""

    ok: bool
    lines: tuple[str, ...]


ALIVE = Health(True, ("alive: the loop answers",))


def readiness(
    *,
    expected: Sequence[int] | None,
    connected: Mapping[int, bool],
    store_open: bool,
    stopping: bool,
) -> Health:
    """Ready when every shard of `expected` (None: every shard started) is connected, the
    store is open and the process is not stopping."""
    lines = []
    shards = sorted(connected) if expected is None else list(expected)
    if not shards:
        lines.append("shards: none started yet")
    for shard in shards:
        state = "connected" if connected.get(shard, False) else (
            "not connected" if shard in connected else "not started")
        lines.append(f"shard {shard}: {state}")
    lines.append(f"store: {'open' if store_open else 'closed'}")
    if stopping:
        lines.append("stopping")
    ok = (
        bool(shards)
        and all(connected.get(shard, False) for shard in shards)
        and store_open
        and not stopping
    )
    return Health(ok, tuple(lines))


def head_complete(data: bytes) -> bool:
    """Whether `data` holds a request's whole head (its blank line), or more than may be read."""
    return b"\r\n\r\n" in data or b"\n\n" in data or len(data) > HEAD_LIMIT


def answer(head: bytes, live: Health, ready: Health) -> bytes:
    """The response to a request whose head (up to its blank line) is `head`."""
    if len(head) > HEAD_LIMIT and not head_complete(head[:HEAD_LIMIT]):
        return response(431, "request head too large\n")
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return response(400, "not an HTTP/1 request line\n")
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    probe = {LIVE_PATH.encode(): live, READY_PATH.encode(): ready}.get(target)
    if probe is None:
        return response(404, f"ask {LIVE_PATH} or {READY_PATH}\n")
    if method not in (b"GET", b"HEAD"):
        return response(405, "GET or HEAD only\n")
    body = "\n".join(probe.lines) + "\n"
    return response(200 if probe.ok else 503, body, with_body=method == b"GET")


def response(status: int, body: str, *, with_body: bool = True) -> bytes:
    """A whole HTTP/1.1 response that closes its connection."""
    data = body.encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + (data if with_body else b"")
