# A fake Anthropic Messages API on loopback, for tests and benchmarks: no network, no key.
#
# Real HTTP (a threaded server on 127.0.0.1, any free port), so the real
# anthropic SDK talks to it through `base_url`. It records every request,
# answers with a pluggable function, and plays failures from a script:
# 429 with retry-after, 529, 500, 504, a hang, a connection dropped halfway,
# the spend-limit refusal. Its prompt cache is eva.plan.cache_model on its own
# clock, with the provider's rules: at most four marks and no one-hour mark
# after a five-minute one (refused with a 400 as the provider refuses them),
# each entry living its mark's lifetime, writes reported per lifetime. It
# counts tokens as eva.core.prompt.estimate_tokens does with the newer
# tokenizer's bytes per token, and answers /v1/messages/count_tokens the same
# way: an estimate, said so.
from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eva.core.prices import BYTES_PER_TOKEN
from eva.core.prompt import estimate_tokens
from eva.plan.cache_model import Block, CacheRuleError, CacheSimulator, RequestUsage, block_key

JSON = dict[str, Any]


def tokens(text: str) -> int:
    """The fake's token count: UTF-8 bytes over the newer tokenizer's bytes per token."""
    return estimate_tokens(text, BYTES_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: JSON


@dataclass(frozen=True, slots=True)
class Failure:
    """A scripted failure for the next request to /v1/messages."""

    status: int = 500
    error_type: str = "api_error"
    message: str = "internal error"
    retry_after: float | None = None
    hang_s: float = 0.0
    drop: bool = False  # send half an answer, then close the connection


OVERLOADED = Failure(529, "overloaded_error", "Overloaded")
SPEND_LIMIT = Failure(
    429, "rate_limit_error", "You have reached your specified API usage limits (spend limit)."
)


def rate_limited(retry_after: float = 1.0) -> Failure:
    return Failure(429, "rate_limit_error", "Number of requests exceeded", retry_after)


Answer = Callable[[JSON], str | list[JSON]]
"""From a request body to the reply's text (or its content blocks)."""


def echo_answer(body: JSON) -> str:
    return "ok"


@dataclass
class FakeMessagesAPI:
    """The fake server's state; start it with `serve()`."""

    answer: Answer = echo_answer
    requests: list[Recorded] = field(default_factory=list)
    script: deque[Failure] = field(default_factory=deque)
    key: str = "test-key"
    min_cache_tokens: int = 0
    """The shortest prefix the fake caches (the real models: 512 and more)."""
    hold_batches: bool = False
    """While True, every message batch stays in progress (as one taking hours would)."""
    _cache: CacheSimulator | None = None
    _batches: dict[str, JSON] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    @contextmanager
    def serve(self) -> Iterator[FakeMessagesAPI]:
        """Run the server in a thread for the length of the block; `url` is its base URL."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: without this, the body waits
            # for the client's delayed ACK of the headers (about 40 ms a reply).
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_port}"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()

    def message_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def batch_messages(self) -> list[JSON]:
        """Every message the batches made so far hold, in the order they were made."""
        with self._lock:
            return [result["result"]["message"] for entry in self._batches.values()
                    for result in entry["results"]]

    def drop_batches(self) -> None:
        """Forget every batch, as the API does once results expire."""
        with self._lock:
            self._batches.clear()

    # -- the handler ----------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body: JSON = json.loads(raw) if raw else {}
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.requests.append(Recorded(method, handler.path, headers, body))
        authorization = headers.get("authorization", "")
        if authorization != f"Bearer {self.key}" and headers.get("x-api-key") != self.key:
            self._send(handler, 401, _error("authentication_error", "invalid x-api-key"))
            return
        if method == "POST" and handler.path == "/v1/messages":
            self._messages(handler, body)
        elif method == "POST" and handler.path == "/v1/messages/count_tokens":
            total = sum(tokens(text) for text, _ in _prompt_blocks(body))
            self._send(handler, 200, {"input_tokens": total})
        elif method == "POST" and handler.path == "/v1/messages/batches":
            self._create_batch(handler, body)
        elif method == "GET" and handler.path.startswith("/v1/messages/batches/"):
            self._batch(handler, handler.path.removeprefix("/v1/messages/batches/"))
        else:
            self._send(handler, 404, _error("not_found_error", f"no {method} {handler.path}"))

    def _messages(self, handler: BaseHTTPRequestHandler, body: JSON) -> None:
        failure = None
        with self._lock:
            if self.script:
                failure = self.script.popleft()
        if failure is not None:
            if failure.hang_s:
                time.sleep(failure.hang_s)
            if failure.drop:
                self._drop(handler, self.reply(body))
                return
            if failure.status != 200:
                extra = {}
                if failure.retry_after is not None:
                    extra["retry-after"] = str(failure.retry_after)
                self._send(
                    handler, failure.status, _error(failure.error_type, failure.message), extra
                )
                return
        try:
            answered = self.reply(body)
        except CacheRuleError as error:
            self._send(handler, 400, _error("invalid_request_error", str(error)))
            return
        self._send(handler, 200, answered)

    def reply(self, body: JSON) -> JSON:
        """The message the fake answers `body` with, usage and cache included.

        Raises CacheRuleError for cache marks the provider refuses.
        """
        cached = self._prompt_tokens(body)
        answer = self.answer(body)
        content = [{"type": "text", "text": answer}] if isinstance(answer, str) else answer
        output = sum(
            tokens(json.dumps(b) if b.get("type") != "text" else b["text"]) for b in content
        )
        stop = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        return {
            "id": f"msg_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "unknown"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": cached.uncached,
                "output_tokens": output,
                "cache_creation_input_tokens": cached.write,
                "cache_read_input_tokens": cached.read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": cached.write_5m,
                    "ephemeral_1h_input_tokens": cached.write_1h,
                },
            },
        }

    def _prompt_tokens(self, body: JSON) -> RequestUsage:
        """What a request reads from the cache, writes to it and pays as plain input."""
        blocks = [
            Block(tokens(text), block_key(text), ttl) for text, ttl in _prompt_blocks(body)
        ]
        with self._lock:
            if self._cache is None:
                self._cache = CacheSimulator(min_tokens=self.min_cache_tokens)
            return self._cache.request(blocks, time.monotonic())

    # -- batches ----------------------------------------------------------------

    def _create_batch(self, handler: BaseHTTPRequestHandler, body: JSON) -> None:
        batch_id = f"msgbatch_{next(self._ids)}"
        results = []
        for request in body.get("requests", []):
            message = self.reply(request["params"])
            results.append(
                {
                    "custom_id": request["custom_id"],
                    "result": {"type": "succeeded", "message": message},
                }
            )
        batch = _batch_object(batch_id, len(results), self.url)
        with self._lock:
            self._batches[batch_id] = {"object": batch, "results": results, "polls": 0}
        self._send(handler, 200, {**batch, "processing_status": "in_progress", "ended_at": None})

    def _batch(self, handler: BaseHTTPRequestHandler, rest: str) -> None:
        batch_id, _, tail = rest.partition("/")
        entry = self._batches.get(batch_id)
        if entry is None:
            self._send(handler, 404, _error("not_found_error", f"no batch {batch_id}"))
        elif tail == "results":
            lines = "".join(json.dumps(r) + "\n" for r in entry["results"]).encode()
            handler.send_response(200)
            handler.send_header("content-type", "application/binary")
            handler.send_header("content-length", str(len(lines)))
            handler.end_headers()
            handler.wfile.write(lines)
        elif self.hold_batches:
            self._send(handler, 200, {**entry["object"], "processing_status": "in_progress",
                                      "ended_at": None})
        else:
            self._send(handler, 200, entry["object"])

    # -- wire -----------------------------------------------------------------

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        body: JSON,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.send_header("request-id", f"req_{status}")
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its time-out)
            handler.close_connection = True

    @staticmethod
    def _drop(handler: BaseHTTPRequestHandler, body: JSON) -> None:
        data = json.dumps(body).encode()
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[: len(data) // 2])
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(2)


def _error(error_type: str, message: str) -> JSON:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _batch_object(batch_id: str, count: int, url: str) -> JSON:
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": "ended",
        "request_counts": {
            "processing": 0,
            "succeeded": count,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        },
        "ended_at": "2026-01-01T00:00:00Z",
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": "2026-01-02T00:00:00Z",
        "archived_at": None,
        "cancel_initiated_at": None,
        "results_url": f"{url}/v1/messages/batches/{batch_id}/results",
    }


def _prompt_blocks(body: JSON) -> list[tuple[str, str | None]]:
    """The prompt as (text, lifetime of the cache mark on it or None), in cache order: tools,
    system, messages."""
    blocks: list[tuple[str, str | None]] = []
    for tool in body.get("tools", []):
        plain = {k: v for k, v in tool.items() if k != "cache_control"}
        blocks.append((json.dumps(plain, sort_keys=True), _ttl(tool)))
    system = body.get("system")
    if isinstance(system, str):
        blocks.append((system, None))
    elif isinstance(system, list):
        blocks.extend((b.get("text", ""), _ttl(b)) for b in system)
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            blocks.append((content, None))
            continue
        for block in content:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            text = block.get("text") or json.dumps(plain, sort_keys=True)
            blocks.append((text, _ttl(block)))
    return blocks


def _ttl(block: JSON) -> str | None:
    mark = block.get("cache_control")
    if mark is None:
        return None
    return str(mark.get("ttl", "5m"))
