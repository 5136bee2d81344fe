# What Eva keeps about one person: their messages, the lines that credit them, and the
# records that concern them (forgets, Eva's replies to them).
#
# Shell: reads the store, channel by channel, in short transactions. It never gives
# anyone else's words: only the person's own messages, and the lines whose authors
# include them, whole when they credit the person alone and else only what they say
# the person said (eva.core.their_part). While a forget of the person is under way
# their words are withheld here too. `data_files` sizes the result for Discord.
from __future__ import annotations

import gzip
from datetime import UTC, datetime
from typing import TypeVar

import msgspec

from eva.core.address import Address, format_address
from eva.core.audit import describe
from eva.core.events import (
    ErasureUnproven,
    ForgetApplied,
    ForgetRequested,
    LineWritten,
    MessagesErased,
    ReplyWritten,
    event_tag,
)
from eva.core.keys import StreamId
from eva.core.opt_out import EVERY_GUILD
from eva.core.their_part import their_part
from eva.store.event_store import EventStore
from eva.store.opt_outs import read_opt_outs

T = TypeVar("T")


class PersonMessage(msgspec.Struct, frozen=True, kw_only=True):
    channel: str
    channel_name: str
    index: int
    message_id: int
    at: str
    content: str
    attachments: tuple[str, ...] = ()
    edited: bool = False


class PersonLine(msgspec.Struct, frozen=True, kw_only=True):
    channel: str
    address: str
    first: str
    last: str
    text: str  # the whole line when it credits them alone, else only what it says they said
    how: str
    others: int = 0  # how many other people the line credits (their words left out)


class PersonRecord(msgspec.Struct, frozen=True, kw_only=True):
    channel: str
    seq: int
    at: str
    kind: str
    detail: str


class PersonData(msgspec.Struct, kw_only=True):
    """One person's data as Eva keeps it."""

    user_id: int
    person_hash: str
    channels: list[str] = msgspec.field(default_factory=list)
    messages: list[PersonMessage] = msgspec.field(default_factory=list)
    lines: list[PersonLine] = msgspec.field(default_factory=list)
    records: list[PersonRecord] = msgspec.field(default_factory=list)
    deleted_messages: int = 0  # deleted or erased: counted, never shown
    withheld_channels: list[str] = msgspec.field(default_factory=list)  # a forget under way
    kept_out_of: list[int] = msgspec.field(default_factory=list)  # guilds (0: every one)
    """Where they asked Eva to keep nothing they write (eva.core.opt_out)."""
    part: int = 1  # of `parts`, when the data is sent in several files
    parts: int = 1


def iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="seconds")


class Named(msgspec.Struct, frozen=True, kw_only=True):
    """A person a name given on the command line can mean."""

    user_id: int
    names: tuple[str, ...]  # every name their stored messages carry, most used first
    messages: int


def people_named(
    store: EventStore, name: str, guild: int | None = None
) -> tuple[list[Named], list[str]]:
    """Who `name` can mean, and every stored name (for a hint when nobody matches).

    A person matches when one of the names their stored messages carry is `name`,
    in any case and with or without a leading `@`; when nobody matches so, a person
    whose name holds `name` does. Deleted messages carry no name worth matching.
    """
    wanted = name.strip().removeprefix("@").casefold()
    counts: dict[int, dict[str, int]] = {}
    for meta in store.streams():
        if guild is not None and meta.guild_id != guild:
            continue
        stream = StreamId(meta.guild_id, meta.channel_id)
        for _, message in store.messages(stream, 0, meta.messages):
            if message.deleted:
                continue
            names = counts.setdefault(message.posted.author_id, {})
            author = message.posted.author_name
            names[author] = names.get(author, 0) + 1
    people = [
        Named(user_id=user_id,
              names=tuple(sorted(names, key=lambda n: (-names[n], n))),
              messages=sum(names.values()))
        for user_id, names in counts.items()
    ]
    exact = [p for p in people if any(n.casefold() == wanted for n in p.names)]
    partial = [p for p in people if any(wanted in n.casefold() for n in p.names)]
    found = sorted(exact or (partial if wanted else []), key=lambda p: (-p.messages, p.user_id))
    return found, sorted({n for p in people for n in p.names})


def person_data(store: EventStore, user_id: int, guild: int | None = None) -> PersonData:
    """Everything the store keeps about `user_id`, in every channel (or one guild's)."""
    hashes = store.hashes.all_of(user_id)
    data = PersonData(user_id=user_id, person_hash=hashes[0])
    data.kept_out_of = sorted(
        {g for g, person in read_opt_outs(store) if person in hashes
         and (guild is None or g in (guild, EVERY_GUILD))}
    )
    for meta in store.streams():
        if guild is not None and meta.guild_id != guild:
            continue
        stream = StreamId(meta.guild_id, meta.channel_id)
        channel = f"{stream.guild_id}/{stream.channel_id}"
        withheld = any(hashed in meta.forgetting for hashed in hashes)
        theirs: set[int] = set()
        names: set[str] = set()
        found = False
        for index, message in store.messages(stream, 0, meta.messages):
            if message.posted.author_id != user_id:
                continue
            found = True
            if message.deleted:
                data.deleted_messages += 1
                continue
            theirs.add(message.posted.message_id)
            names.add(message.posted.author_name)
            if withheld:
                continue
            data.messages.append(
                PersonMessage(
                    channel=channel,
                    channel_name=meta.channel_name,
                    index=index,
                    message_id=message.posted.message_id,
                    at=iso(message.posted.at_ms),
                    content=message.content,
                    attachments=message.attachments,
                    edited=message.edited_at_ms is not None,
                )
            )
        records, credited = _records_and_lines(store, stream, channel, hashes, user_id, theirs)
        if withheld:
            data.withheld_channels.append(channel)
        else:
            for start, size in sorted(credited):
                line = store.line(stream, start, size)
                if line is not None and user_id in line.authors:
                    data.lines.append(_line(channel, line, user_id, names))
        data.records.extend(records)
        if found or records:
            data.channels.append(channel)
    return data


def _records_and_lines(
    store: EventStore, stream: StreamId, channel: str, hashes: tuple[str, ...], user_id: int,
    theirs: set[int],
) -> tuple[list[PersonRecord], set[tuple[int, int]]]:
    """The records that concern the person (forgets under their hash, Eva's replies to
    their messages) and the addresses of every line ever written crediting them."""
    records: list[PersonRecord] = []
    credited: set[tuple[int, int]] = set()
    for seq, event in store.events(stream):
        match event:
            case LineWritten() if user_id in event.authors:
                credited.add((event.start, event.size))
                continue
            case ForgetRequested() | ForgetApplied() | ErasureUnproven() | MessagesErased() if (
                event.person_hash in hashes
            ):
                pass
            case ReplyWritten() if event.to_message_id in theirs:
                pass
            case _:
                continue
        detail, _ = describe(event)
        records.append(PersonRecord(
            channel=channel, seq=seq, at=iso(event.at_ms), kind=event_tag(event), detail=detail
        ))
    return records, credited


def _line(channel: str, line: LineWritten, user_id: int, names: set[str]) -> PersonLine:
    others = len(set(line.authors) - {user_id})
    return PersonLine(
        channel=channel,
        address=format_address(Address(line.start, line.size)),
        first=iso(line.first_ms),
        last=iso(line.last_ms),
        text=their_part(line.text, names) if others else line.text,
        how=line.how,
        others=others,
    )


MOST_FILES = 10
"""The most files one person's data is sent in; past that it is too large for Discord."""


def data_files(data: PersonData, stem: str, limit: int) -> list[tuple[str, bytes]] | None:
    """The person's data as files of at most `limit` bytes each: one JSON file when it
    fits, else the same compressed with gzip, else the messages and lines dealt into
    parts of one gzip file each, the records and figures in the first (None when even
    MOST_FILES parts are too large)."""
    document = msgspec.json.format(msgspec.json.encode(data), indent=2)
    if len(document) <= limit:
        return [(f"{stem}.json", document)]
    for parts in range(1, MOST_FILES + 1):
        files = [
            (f"{stem}.json.gz" if parts == 1 else f"{stem}-{part + 1}-of-{parts}.json.gz",
             gzip.compress(msgspec.json.encode(_part(data, part, parts)), mtime=0))
            for part in range(parts)
        ]
        if all(len(content) <= limit for _, content in files):
            return files
    return None


def _part(data: PersonData, part: int, parts: int) -> PersonData:
    """Part `part` (from 0) of `parts`: an equal share of the messages and of the lines."""
    if parts == 1:
        return data

    def share(items: list[T]) -> list[T]:
        return items[len(items) * part // parts : len(items) * (part + 1) // parts]

    return msgspec.structs.replace(
        data,
        messages=share(data.messages),
        lines=share(data.lines),
        records=data.records if part == 0 else [],
        part=part + 1,
        parts=parts,
    )


def summary(data: PersonData) -> str:
    """One sentence: where the person's data is and how much of it there is."""
    where = f"in {len(data.channels)} channel{'s' if len(data.channels) != 1 else ''}"
    text = (
        f"user {data.user_id} (recorded as {data.person_hash}) {where}: "
        f"{len(data.messages)} messages, {len(data.lines)} lines, {len(data.records)} records"
    )
    if data.deleted_messages:
        text += f"; {data.deleted_messages} deleted or erased messages kept without their words"
    if data.kept_out_of:
        where = ", ".join("every server" if g == EVERY_GUILD else f"guild {g}"
                          for g in data.kept_out_of)
        text += f"; they asked that nothing they write be kept in {where}"
    if data.withheld_channels:
        text += (
            f"; a forget of them is under way in {len(data.withheld_channels)} channels, "
            "so their words there are not shown"
        )
    return text
