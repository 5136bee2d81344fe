"""Feed Eva thousands of mutated inputs; each must end in a clean refusal or a right result.

Three targets, the mutations drawn by Hypothesis:

- exports: a small DiscordChatExporter export, changed in its structure (a field of the
  wrong type, huge and negative numbers, a duplicated id, a lone surrogate, NUL, deep
  nesting, a field removed, a huge text) or in its bytes (flipped, cut short, put in),
  imported by `eva import` in this process. Either it is refused with one line and exit
  1, writing nothing, or it is imported and every message stands under its id, once, in
  the export's order, with the export's text, and the log replays with its seals whole.
- stored events: one event of a built data directory changed in place (bytes flipped,
  cut short, another event's bytes, a field of the wrong type, huge or negative
  numbers). `eva replay` must exit 1 naming that event; audit, memory, zoom, recall and
  status each answer or refuse in one line; none ends in a fault of Eva's own.
- gateway payloads: MESSAGE_CREATE payloads changed like the exports, read by the bot's
  payload reader and stored through the event store: left out with a PayloadError, or
  stored with the payload's own id, author and text, and read back the same.

Every case runs under a time limit (a hang fails it).

    python scripts/fuzz_suite.py [--cases 1000] [--only exports,events,payloads]

Prints the outcomes per target and, last, one JSON object; exits 1 on the first case
with an outcome outside those above, after printing it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from eva.cli.main import EXIT_INTERNAL
from eva.cli.main import main as eva_main
from eva.core.events import MessagePosted, decode_event, encode_event
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.demo.friends import friends_export
from eva.discord.payloads import PayloadError, asks_eva, chat_post, chat_stream
from eva.live.inputs import posted_event
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

CASE_SECONDS = 20
DEEP = "\u0000deep\u0000"  # stands where a deeply nested value goes into the JSON text


class Unacceptable(AssertionError):
    """A case ended outside the outcomes the suite allows."""


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def eva(*args: str) -> tuple[int, str, str]:
    """`eva ARGS` in this process: its exit status, standard output and error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = eva_main(list(args))
        except SystemExit as exit_:  # argparse refusing arguments
            status = int(exit_.code or 0)
    return status, out.getvalue(), err.getvalue()


def one_clean_line(status: int, err: str, what: str, says_why: bool = True) -> None:
    """No fault of Eva's own; and a refusal (unless it `says_why` elsewhere) in one line."""
    if status == EXIT_INTERNAL or "Traceback" in err:
        raise Unacceptable(f"{what}: a fault of Eva's own: {err[-600:]}")
    if says_why and status != 0 and err.count("\n") != 1:
        raise Unacceptable(f"{what}: refused in {err.count(chr(10))} lines: {err[-600:]}")


# -- mutations -----------------------------------------------------------------------

ODD_TEXTS = ["\ud800", "a\udfffb", "nul\x00inside", "\u202eright to left", "", " ", "😀" * 40,
             "x" * 300_000, "<line address=\"0+1\">", "\ufeff", "e\u0301" * 50]
ODD_NUMBERS = [0, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1,
               10**30, 1.5, -0.0, float("inf"), float("nan")]

mutants: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(ODD_NUMBERS),
    st.integers(),
    st.floats(),
    st.sampled_from(ODD_TEXTS),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.just(DEEP),
)


def paths(value: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value (keys of objects, positions of arrays), depth first."""
    yield here
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*here, key))
    elif isinstance(value, list):
        for at, inner in enumerate(value):
            yield from paths(inner, (*here, at))


def set_at(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = set_at(value[path[0]], path[1:], new)
    return copy


def drop_at(value: Any, path: tuple[Any, ...]) -> Any:
    if len(path) == 1:
        copy = dict(value) if isinstance(value, dict) else list(value)
        del copy[path[0]]
        return copy
    return set_at(value, path[:1], drop_at(value[path[0]], path[1:]))


def _messages(value: Any) -> int:
    """How many messages an export value holds (0 if it holds no list of them)."""
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        return 0
    return len(value["messages"])


def json_text(value: Any, depth: int) -> bytes:
    text = json.dumps(value, ensure_ascii=True)  # a lone surrogate goes in as its escape
    nested = "[" * depth + "]" * depth
    return text.replace(json.dumps(DEEP), nested).encode()


@st.composite
def mutated_json(draw: st.DrawFn, base: Any) -> bytes:
    """`base` with one to three changes of its structure, then maybe of its bytes."""
    value = base
    for _ in range(draw(st.integers(1, 3))):
        places = list(paths(value))
        path = draw(st.sampled_from(places))
        how = draw(st.sampled_from(["replace", "replace", "drop", "duplicate id", "copy"]))
        if how == "drop" and path:
            value = drop_at(value, path)
        elif how == "duplicate id" and _messages(value) > 1:
            messages = value["messages"]
            a, b = draw(st.integers(0, len(messages) - 1)), draw(st.integers(0, len(messages) - 1))
            if isinstance(messages[a], dict) and isinstance(messages[b], dict):
                value = set_at(value, ("messages", a, "id"), messages[b].get("id"))
        elif how == "copy" and _messages(value) > 0:
            message = draw(st.sampled_from(value["messages"]))
            value = set_at(value, ("messages",), [*value["messages"], message])
        else:
            value = set_at(value, path, draw(mutants))
    raw = json_text(value, draw(st.sampled_from([3, 64, 5_000, 200_000])))
    return draw(mutated_bytes(raw, rare=True))


@st.composite
def mutated_bytes(draw: st.DrawFn, raw: bytes, rare: bool = False) -> bytes:
    """`raw` with bytes flipped, cut short or put in (with `rare`, mostly left alone)."""
    if rare and draw(st.integers(0, 3)):
        return raw
    how = draw(st.sampled_from(["flip", "cut", "insert"]))
    at = draw(st.integers(0, max(len(raw) - 1, 0)))
    if how == "cut":
        return raw[:at]
    if how == "insert":
        return raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    flipped = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        spot = draw(st.integers(0, max(len(raw) - 1, 0)))
        if flipped:
            flipped[spot] ^= draw(st.integers(1, 255))
    return bytes(flipped)


# -- exports -------------------------------------------------------------------------


def expected_messages(raw: bytes) -> tuple[StreamId, list[tuple[int, int, str]]] | None:
    """What a right import of `raw` stores, read without Eva's own reader: the stream, and
    (id, author id, text) of the first message under each id, in order."""
    try:
        # bytes that are not UTF-8 are read as U+FFFD: a field Eva ignores may hold them
        value = json.loads(raw.decode("utf-8-sig", errors="replace"))
        stream = StreamId(int(value["guild"]["id"]), int(value["channel"]["id"]))
        seen: set[int] = set()
        messages = []
        for message in value.get("messages", []):
            message_id = int(message["id"])
            if message_id in seen:
                continue
            seen.add(message_id)
            messages.append((message_id, int(message["author"]["id"]), message["content"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return stream, messages


def export_case(raw: bytes, root: Path, outcomes: Counter[str]) -> None:
    export, data = root / "export.json", root / "data"
    shutil.rmtree(data, ignore_errors=True)
    export.write_bytes(raw)
    with time_limit(CASE_SECONDS):
        status, _, err = eva("import", str(export), "--data", str(data), "--quiet")
    one_clean_line(status, err, "import")
    if status != 0:
        stored = stored_messages(data) if data.exists() else {}
        if any(stored.values()):
            raise Unacceptable(f"a refused import stored messages: {err.strip()}")
        outcomes["refused in one line"] += 1
        return
    expected = expected_messages(raw)
    if expected is None:
        raise Unacceptable("imported an export that is not valid JSON of an export")
    stream, messages = expected
    stored = stored_messages(data)
    if list(stored) != [stream] or stored[stream] != messages:
        raise Unacceptable(f"imported other than the export holds: {stored} vs {messages}")
    check_log(data)
    outcomes["imported right"] += 1


def stored_messages(data: Path) -> dict[StreamId, list[tuple[int, int, str]]]:
    backend = open_backend(data)
    try:
        store = EventStore(backend)
        return {
            StreamId(meta.guild_id, meta.channel_id): [
                (m.posted.message_id, m.posted.author_id, m.content)
                for _, m in store.messages(
                    StreamId(meta.guild_id, meta.channel_id), 0, meta.messages
                )
            ]
            for meta in store.streams()
        }
    finally:
        backend.close()


def check_log(data: Path) -> None:
    backend = open_backend(data)
    try:
        store = EventStore(backend)
        for meta in store.streams():
            result = replay_stream(store, StreamId(meta.guild_id, meta.channel_id))
            if not result.ok:
                raise Unacceptable(f"the stored log does not replay: {result}")
    finally:
        backend.close()


def run_exports(cases: int, root: Path, outcomes: Counter[str]) -> None:
    base = json.loads(friends_export(30))

    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutated_json(base))
    def case(raw: bytes) -> None:
        try:
            export_case(raw, root, outcomes)
        except Unacceptable as error:
            raise Unacceptable(f"{error}\n  export: {raw[:800]!r}") from None

    case()


# -- stored events -------------------------------------------------------------------


@st.composite
def mutated_event(draw: st.DrawFn, raw: bytes, others: list[bytes]) -> bytes:
    how = draw(st.sampled_from(["bytes", "bytes", "another", "field"]))
    if how == "another":
        return draw(st.sampled_from(others))
    if how == "field":
        value = msgspec.msgpack.decode(raw)
        if isinstance(value, list) and len(value) > 1:
            at = draw(st.integers(1, len(value) - 1))
            value[at] = draw(mutants)
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                return msgspec.msgpack.encode(value)
    return draw(mutated_bytes(raw))


def events_case(
    data: Path, stream: StreamId, seq: int, mutated: bytes, original: bytes,
    outcomes: Counter[str],
) -> None:
    backend = open_backend(data)
    key = _event_key(stream, seq)
    backend.write(lambda tables: tables.put("events", key, mutated))
    try:
        channel = f"{stream.guild_id}/{stream.channel_id}"
        with time_limit(CASE_SECONDS):
            status, out, err = eva("replay", "--data", str(data))
        one_clean_line(status, err, "replay", says_why=False)  # its verdict is on stdout
        if status != 1 or f"event {seq}" not in out:
            raise Unacceptable(f"replay did not name event {seq}: {status} {out[-400:]}")
        outcomes["replay named it"] += 1
        for args in (["audit", channel], ["memory", channel], ["zoom", channel, f"{seq % 50}+1"],
                     ["recall", channel, "trip"], ["status"]):
            with time_limit(CASE_SECONDS):
                status, _, err = eva(*args, "--data", str(data))
            one_clean_line(status, err, " ".join(args))
            outcomes[f"{args[0]} {'answered' if status == 0 else 'refused in one line'}"] += 1
    finally:
        backend.write(lambda tables: tables.put("events", key, original))


def _event_key(stream: StreamId, seq: int) -> bytes:
    from eva.core import keys

    return keys.event_key(stream, seq)


def run_events(cases: int, root: Path, outcomes: Counter[str]) -> None:
    data = root / "built"
    export = root / "friends.json"
    export.write_bytes(friends_export(300))
    for args in (["import", str(export), "--quiet"], ["build"]):
        status, _, err = eva(*args, "--data", str(data))
        assert status == 0, err
    backend = open_backend(data)
    store = EventStore(backend)
    meta = store.streams()[0]
    stream = StreamId(meta.guild_id, meta.channel_id)
    stored = [bytes(raw) for _, raw in store.raw_events(stream)]

    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def case(drawn: st.DataObject) -> None:
        seq = drawn.draw(st.integers(0, len(stored) - 1))
        mutated = drawn.draw(mutated_event(stored[seq], stored))
        if mutated == stored[seq]:
            outcomes["unchanged, skipped"] += 1
            return
        try:
            events_case(data, stream, seq, mutated, stored[seq], outcomes)
        except Unacceptable as error:
            raise Unacceptable(f"{error}\n  event {seq} stored as {mutated[:300]!r}") from None

    case()
    backend.close()


# -- gateway payloads ----------------------------------------------------------------

EVA_ID = 1_100_000_000_000_000_001


def base_payload(number: int) -> dict[str, Any]:
    return {
        "id": str(1_200_000_000_000_000_000 + number),
        "type": 0,
        "guild_id": "1130000000000000001",
        "channel_id": "1130000000000000002",
        "timestamp": "2026-12-01T10:00:00.000000+00:00",
        "content": f"message {number} about the trip <@{EVA_ID}>",
        "author": {"id": "1140000000000000003", "username": "alice", "global_name": "Alice"},
        "member": {"nick": None},
        "mentions": [{"id": str(EVA_ID), "username": "eva", "global_name": "Eva"}],
        "attachments": [{"id": "1", "filename": "plan.png"}],
        "message_reference": {"message_id": "1200000000000000000"},
    }


def payload_case(payload: Any, store: EventStore, outcomes: Counter[str]) -> None:
    with time_limit(CASE_SECONDS):
        try:  # as the bot reads a MESSAGE_CREATE (EvaBot._take_created)
            post = chat_post(payload, EVA_ID, "Eva")
            if post is None:
                outcomes["not chat, left out"] += 1
                return
            asks_eva(payload, EVA_ID)
            stream = chat_stream(payload)
        except PayloadError:
            outcomes["left out (PayloadError)"] += 1
            return
        except Exception as error:
            raise Unacceptable(
                f"the payload reader raised {type(error).__name__}: {error}"
            ) from error
    meta = store.meta(stream)
    index = 0 if meta is None else meta.messages
    try:
        seq = store.append(stream, [posted_event(post, index)]).first
    except Rejected as error:
        reason = str(error).split(": ", 1)[-1][:50]
        outcomes[f"refused by the store ({reason})"] += 1
        return
    except Exception as error:
        raise Unacceptable(
            f"storing the post raised {type(error).__name__}: {error}"
        ) from error
    event = store.event(stream, seq)
    if not isinstance(event, MessagePosted):
        raise Unacceptable(f"the stored post reads back as {event!r}")
    if decode_event(encode_event(event)) != event:
        raise Unacceptable("the stored post does not encode back to itself")
    # a lone surrogate cannot be UTF-8: it is kept as U+FFFD
    content = re.sub("[\ud800-\udfff]", "\ufffd", payload.get("content") or "")
    right = (
        event.message_id == int(payload["id"])
        and event.author_id == int(payload["author"]["id"])
        and (event.content == content or "<@" in content)  # mentions are written as names
    )
    if not right:
        raise Unacceptable(f"stored {event!r} from {str(payload)[:400]}")
    outcomes["stored right"] += 1


def run_payloads(cases: int, root: Path, outcomes: Counter[str]) -> None:
    backend = open_backend(root / "payloads")
    store = EventStore(backend)
    numbers = iter(range(10**9))

    @st.composite
    def payloads(draw: st.DrawFn) -> Any:
        base = base_payload(next(numbers))
        value: Any = base
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(list(paths(value))[1:]))  # the gateway sends objects
            if draw(st.booleans()):
                value = drop_at(value, path)
            else:
                new = draw(mutants)
                value = set_at(value, path, [[[[1]]]] if new == DEEP else new)
        return value

    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(payloads())
    def case(payload: Any) -> None:
        try:
            payload_case(payload, store, outcomes)
        except Unacceptable as error:
            raise Unacceptable(f"{error}\n  payload: {str(payload)[:800]}") from None

    try:
        case()
    finally:
        backend.close()


TARGETS: dict[str, Callable[[int, Path, Counter[str]], None]] = {
    "exports": run_exports,
    "events": run_events,
    "payloads": run_payloads,
}


def run_suite(cases: int, only: list[str], root: Path) -> dict[str, Counter[str]]:
    results: dict[str, Counter[str]] = {}
    random.seed(0)
    for name in only:
        outcomes: Counter[str] = Counter()
        started = time.perf_counter()
        place = root / name
        place.mkdir(parents=True, exist_ok=True)
        TARGETS[name](cases, place, outcomes)
        seconds = time.perf_counter() - started
        print(f"{name}: {sum(outcomes.values())} outcomes in {seconds:.0f} s: {dict(outcomes)}",
              file=sys.stderr, flush=True)
        results[name] = outcomes
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases per target")
    parser.add_argument("--only", default=",".join(TARGETS), help="targets, comma separated")
    args = parser.parse_args(argv)
    only = [name for name in args.only.split(",") if name]
    if unknown := [name for name in only if name not in TARGETS]:
        parser.error(f"no such target: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="eva-fuzz-") as temp:
        try:
            results = run_suite(args.cases, only, Path(temp))
        except Unacceptable as error:
            print(f"fuzz_suite: {error}", file=sys.stderr)
            return 1
    print(json.dumps({name: dict(outcomes) for name, outcomes in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
