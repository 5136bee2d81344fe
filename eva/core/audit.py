# The audit of a channel's memory: its history told from the log alone.
#
# Pure: it folds (sequence, event) pairs into plain records. It never shows a
# message's words: the history of the memory is lines, publishes, tools and
# forgets, with messages counted between them.
from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

import msgspec

from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    ErasureUnproven,
    ForgetApplied,
    ForgetRequested,
    LineWritten,
    LogRewritten,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    MessagesErased,
    ReplyWritten,
    RowPublished,
    ToolCalled,
    event_tag,
)


class AuditEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that happened to the memory; `detail` is what a person reads."""

    seq: int
    at_ms: int
    kind: str
    detail: str
    address: str | None = None
    messages_before: int = 0  # messages posted since the previous entry


def describe(event: AnyEvent) -> tuple[str, str | None]:
    """A one-line account of a memory event, and its address if it has one."""
    match event:
        case LineWritten():
            address = f"{event.start}+{event.size}"
            how: str = event.how
            if event.how == "model":
                how = f"model {event.model or '?'}"
                if event.usage is not None:
                    u = event.usage
                    how += (
                        f", tokens in {u.input_tokens} out {u.output_tokens}"
                        f" cache write {u.cache_write_tokens} read {u.cache_read_tokens}"
                    )
            size = len(event.text.encode())
            return f"line {address} written ({how}), {size} bytes", address
        case RowPublished():
            return (
                f"row published ({event.reason}): {len(event.entries)} lines over "
                f"{event.frontier} messages, {event.row_bytes} bytes",
                None,
            )
        case ForgetRequested():
            return f"forget requested for person {event.person_hash} ({event.by})", None
        case ForgetApplied():
            return (
                f"forget applied for person {event.person_hash}: "
                f"{event.messages} messages erased, {event.lines} lines remade",
                None,
            )
        case ErasureUnproven():
            return (
                f"forget of person {event.person_hash} not proven: {event.texts} of their "
                f"texts still found {event.hits} times in {', '.join(event.files)}",
                None,
            )
        case MessagesErased():
            return (
                f"{len(event.indexes)} messages erased for person {event.person_hash}",
                None,
            )
        case ReplyWritten():
            u = event.usage
            g = event.grounding
            grounded = "" if g is None else (
                f"; details: {g.read} read, {g.summary} only in summaries, "
                f"{g.unsupported} unsupported"
            )
            return (
                f"reply written ({event.model}, {event.tool_calls} tool calls, tokens in "
                f"{u.input_tokens} out {u.output_tokens} cache write {u.cache_write_tokens} "
                f"read {u.cache_read_tokens}){grounded}",
                None,
            )
        case LogRewritten():
            first = event.positions[0] if event.positions else 0
            return (
                f"log rewritten: {len(event.positions)} events from #{first} on kept without "
                f"words no memory uses, {event.resealed} events sealed again from #{first}",
                None,
            )
        case ToolCalled():
            return f"tool {event.name} called, {event.result_bytes} bytes returned", None
        case ChannelDescribed():
            return f"channel named #{event.channel_name} in {event.guild_name}", None
        case MessageEdited():
            return f"message {event.index} edited", None
        case MessageDeleted():
            return f"message {event.index} deleted", None
        case MessagePosted():
            return f"message {event.index} posted", None
        case _:
            assert_never(event)


def history(events: Iterable[tuple[int, AnyEvent]]) -> list[AuditEntry]:
    """Every event but plain posts, with the posts counted into the next entry."""
    entries: list[AuditEntry] = []
    posted = 0
    for seq, event in events:
        if isinstance(event, MessagePosted):
            posted += 1
            continue
        detail, address = describe(event)
        entries.append(
            AuditEntry(
                seq=seq,
                at_ms=event.at_ms,
                kind=event_tag(event),
                detail=detail,
                address=address,
                messages_before=posted,
            )
        )
        posted = 0
    if posted:
        entries.append(
            AuditEntry(seq=-1, at_ms=0, kind="messages", detail="", messages_before=posted)
        )
    return entries


class RowAt(msgspec.Struct, frozen=True):
    """The row as it stood at a time: its publish event and the lines it showed."""

    publish_seq: int
    row: RowPublished
    lines: list[LineWritten | None]


def row_at(
    events: Iterable[tuple[int, AnyEvent]], time_ms: int, *, chat_time: bool = False
) -> RowAt | None:
    """The last row published at or before `time_ms`, with each line as it was then.

    With `chat_time`, `time_ms` is a time of the chat, not of publishing: the row is the
    last one published before the first message posted after it, as Eva read the chat
    then (a channel imported and built later has none from before its build).
    """
    latest: dict[tuple[int, int], LineWritten] = {}
    found: RowAt | None = None
    for seq, event in events:
        if isinstance(event, LineWritten):
            latest[(event.start, event.size)] = event
        elif isinstance(event, RowPublished):
            if not chat_time and event.at_ms > time_ms:
                break
            found = RowAt(seq, event, [latest.get(entry) for entry in event.entries])
        elif chat_time and isinstance(event, MessagePosted) and event.at_ms > time_ms:
            break
    return found
