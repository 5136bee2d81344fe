# What Eva's slash commands say: fixed texts and the forms of their answers.
#
# Pure: plain values in, Discord-ready text out; no hikari, trio or store here
# (eva.discord.commands reads the values and sends the texts).
# Invariants: every text returned fits in one Discord message (2,000 UTF-16
# code units, as Discord counts); text from the chat is shown inside code
# blocks that it cannot close early; a cut text says that it was cut.
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eva.discord.mapping import DISCORD_LIMIT, utf16_units
from eva.memory.forget import ForgetReport

SHOWN_LINE_CHARS = 280  # a row entry shown by /memory is cut to this
FENCE = "```"
CUT_NOTE = "(cut to fit in one Discord message)"

PRIVACY = """\
**What Eva stores**
- Every message in the channels and threads of this server she can read: its text, the \
author's name and id, the time, and attachment names (not the files). Bots' messages too, \
hers included. From the day she joined, and further back when a moderator runs \
`/backfill` or her host imports a channel's history.
- Lines of memory made from them, saying who said what; her replies and the tools she used.
It is kept in a database (LMDB) on her host's machine, what you write encrypted with a key \
of yours (the search index of words is not yet). To write lines and replies, the texts are \
sent to the model provider (Anthropic), under its own terms.

**For how long**
Until a message is deleted in Discord (its words leave her files within ten minutes, \
unless her host set another delay; an edit replaces the old text the same way), its author \
is forgotten, its channel is erased, or she is removed from the server (all of it erased \
30 days later unless she is added back). Otherwise the memory is meant to last.

**Your choices**
- `/forget-me` erases every message you wrote here and every line made from them, then \
checks her files for them. What stays is a record with counts and an id hashed with a \
secret kept apart from the data, and your key is destroyed: a backup taken before no longer \
shows your messages (restoring it forgets you again). Another person's message that quotes \
you stays: it is theirs to forget.
- `/dont-remember-me`: nothing you write here is kept from now on (`/remember-me` undoes it).
- `/my-data` sends you, and only you, what she keeps about you.
- Moderators: `/forget-member`, and `/memory-here` to turn her memory of a channel off \
(and erase it) or on."""

FORGET_ME_ASK = (
    "This erases every message you wrote in this server from Eva's memory, and every line "
    "of memory made from them. It cannot be undone. Your messages stay in Discord; Eva only "
    "forgets them, and she remembers what you write after this as usual, unless you choose "
    "\"don't remember me\": then she keeps nothing you write here from now on "
    "(`/remember-me` undoes that)."
)
FORGET_MEMBER_ASK = (
    "This erases every message {name} wrote in this server from Eva's memory, and every line "
    "of memory made from them. It cannot be undone. Their messages stay in Discord."
)
FORGETTING = "Forgetting… this can take a minute."
CANCELLED = "Nothing was forgotten."
NOT_YOURS = "Only the person who ran this command can press its buttons."
STALE_BUTTON = "This button is no longer in use. Run the command again if you still need it."
NOT_IN_GUILD = "Eva's commands work only in a server's channels."
NOT_MODERATOR = "Only moderators (Manage Messages or Administrator) can use this."
NOT_HERSELF = (
    "Eva cannot forget herself: her own replies are part of the memory. "
    "To remove one, delete it in Discord."
)
NO_MEMORY = "Eva has no memory of this channel yet."
FAILED = "Something went wrong on Eva's side; it has been logged. Please try again later."
ERASURE_UNVERIFIED = (
    "Eva erased the messages and remade the lines, but she could not verify that every copy "
    "of the words is gone from her data files. The people who run Eva have been alerted, and "
    "the forget stays pending until it is finished."
)


def unknown_command(name: str) -> str:
    return f"Eva does not know the command `/{name}`; it may be from an older version of her."


def forget_recorded(who: str) -> str:
    """The promise, once it is durable: the forget finishes even if Eva stops now."""
    return (
        f"Recorded: Eva will forget {who} in this server, even if she is restarted now. "
        "Erasing… this can take a minute."
    )


def forget_done(report: ForgetReport, who: str) -> str:
    """The answer once a forget is done and proven; `who` is "you" or a member's name."""
    if not report.channels:
        return f"Eva had no messages from {who} in this server; there was nothing to forget."
    channels = len(report.channels)
    return (
        f"Done: Eva has forgotten {who} in this server. "
        f"{_count(report.messages_erased, 'message')} erased in "
        f"{_count(channels, 'channel')}, {_count(report.lines_remade, 'line')} of memory "
        f"made again; {_count(report.texts_checked, 'text')} checked in her data files, "
        f"{report.leftover_hits} found."
    )


DONT_REMEMBER_ME = (
    "From now on I keep nothing you write in this server: your messages are not stored, "
    "not made into lines of my memory, not recalled, and not fetched back later. If you ask "
    "me something I read it to answer, and forget it. What I kept before stays: "
    "`/forget-me` erases it. `/remember-me` undoes this."
)
REMEMBER_ME = "I keep what you write in this server again, from now on."
KEPT_OUT_TOO = "And I keep nothing you write here from now on (`/remember-me` undoes that)."


def memory_here(state: str, channel: str) -> str:
    """The answer to /memory-here."""
    if state == "on":
        return f"I keep {channel} again: what is written here from now on is in my memory."
    if state == "off":
        return (
            f"I no longer keep {channel}: nothing written here is stored, and I do not answer "
            "here. What I kept before stays; `/memory-here off-and-erase` erases it."
        )
    return (
        f"I no longer keep {channel}, and what I kept of it is being erased, then my files "
        "are checked for it as a forget is; it is done within minutes once the channel is "
        "quiet."
    )


def memory_here_states(states: tuple[str, ...]) -> str:
    return f"Pick one of: {', '.join(states)}."


def backfilled(count: int) -> str:
    if count == 0:
        return "Eva missed no messages in this channel; nothing new was stored."
    return f"Fetched the history Eva missed: {_count(count, 'message')} stored."


@dataclass(frozen=True, slots=True)
class MemorySummary:
    """What /memory shows: the row's first and last entries and the sizes."""

    first: tuple[str, ...]
    last: tuple[str, ...]
    row_lines: int
    row_bytes: int
    frontier: int
    tail_messages: int
    tail_bytes: int
    messages: int
    deleted: int


def memory_text(summary: MemorySummary) -> str:
    """The /memory answer: sizes, then the first and last row entries in code blocks."""
    if summary.row_lines:
        row = (
            f"The row has {_count(summary.row_lines, 'line')} ({_size(summary.row_bytes)}) "
            f"covering messages 0..{summary.frontier - 1}."
        )
    else:
        row = "No lines yet: everything Eva remembers here is still word for word."
    parts = [
        "**What Eva remembers in this channel**",
        f"{row} After it, the tail holds {_count(summary.tail_messages, 'message')} "
        f"word for word ({_size(summary.tail_bytes)}). "
        f"{_count(summary.messages, 'message')} in all, {summary.deleted} deleted or erased.",
    ]
    if summary.first:
        heading = "Its lines:" if not summary.last else "First lines:"
        parts += [heading, code_block([_short(line) for line in summary.first])]
    if summary.last:
        parts += ["Last lines:", code_block([_short(line) for line in summary.last])]
    parts.append("Open a line with `/zoom address:START+SIZE`; search words with `/recall`.")
    return fit("\n".join(parts))


def code_block(lines: Sequence[str]) -> str:
    """`lines` in a code block that no backticks inside can close early."""
    body = "\n".join(line.replace(FENCE, "`\u200b``") for line in lines)
    return f"{FENCE}\n{body}\n{FENCE}"


def fitted_block(text: str, limit: int = DISCORD_LIMIT) -> str:
    """`text` in a code block, cut at a line end (or inside a very long line) to fit `limit`."""
    whole = code_block(text.splitlines())
    if utf16_units(whole) <= limit:
        return whole
    room = limit - utf16_units(f"{code_block([''])}\n{CUT_NOTE}")
    kept = _prefix(text, room)
    if "\n" in kept:
        kept = kept[: kept.rindex("\n")]
    block = code_block(kept.splitlines())
    while utf16_units(f"{block}\n{CUT_NOTE}") > limit:  # escaped fences made it longer; rare
        kept = kept[:-16]
        block = code_block(kept.splitlines())
    return f"{block}\n{CUT_NOTE}"


def fit(text: str, limit: int = DISCORD_LIMIT) -> str:
    """`text` unchanged if it fits, else cut with an ellipsis."""
    return text if utf16_units(text) <= limit else _prefix(text, limit - 1) + "…"


def _prefix(text: str, units: int) -> str:
    """The longest prefix of `text` within `units` UTF-16 code units."""
    total = 0
    for at, char in enumerate(text):
        total += 2 if ord(char) > 0xFFFF else 1
        if total > units:
            return text[:at]
    return text


def _short(line: str) -> str:
    return line if len(line) <= SHOWN_LINE_CHARS else line[: SHOWN_LINE_CHARS - 1] + "…"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _size(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size / 1024:.1f} KiB"


def my_data(summary: str, files: int = 1) -> str:
    """The answer to /my-data, beside the first file that holds the data."""
    where = "The attached file holds" if files == 1 else (
        f"The {files} files sent here (this one and the next {files - 1}, each compressed "
        "with gzip) hold"
    )
    return (
        f"What I keep about you here: {summary}. {where} every message of yours I have "
        "stored and every line of my memory that credits you, with its dates; of a line "
        "that credits others too, only what it says you said. Only you can see this. "
        "`/forget-me` erases it all."
    )


def my_data_part(name: str) -> str:
    """Beside each file of /my-data after the first."""
    return f"More of what I keep about you: {name}."


def my_data_too_large(summary: str) -> str:
    """/my-data when even its parts are larger than Discord takes."""
    return (
        f"What I keep about you here: {summary}. That is more than Discord lets me send "
        "as files; whoever runs me can give it to you whole (`eva export`). `/forget-me` "
        "erases it all."
    )
