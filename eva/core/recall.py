# What the `recall` tool shows: search hits with the messages around them.
#
# Pure: it is handed the search result, a way to read a message by index, and
# a time zone; it reads no store, clock or time zone database of its own.
# Invariants: deleted or erased messages are never shown; hits appear in rank
# order, each inside one window of nearby messages (overlapping or touching
# windows are merged); the text form never passes `cap_bytes` of UTF-8 and
# says how many hits it left out.
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, tzinfo

import msgspec

from eva.core.block import ShownMessage, local_minute
from eva.core.recall_search import SearchResult
from eva.core.render import cut_to_bytes, flatten_line_breaks, render_message, utf8_size

MESSAGE_BYTES = 300  # a hit's text, at most
CONTEXT_BYTES = 100  # a message shown around a hit, at most
CONTEXT = 1  # messages shown on each side of a hit, at most
CONTEXT_HITS = 10  # the best hits shown with them; the rest alone
# A pause longer than this ends a turn of talk: context stops there.
TURN_GAP_MS = int(0.25 * 60 * 60 * 1000)
# Hits in a row whose windows do not fit before the answer is taken as full.
MISFITS_TRIED = 3
ELLIPSIS = "…"


class RecallLine(msgspec.Struct, frozen=True, kw_only=True):
    """One message in recall's answer; `text` is one line, shortened if long."""

    index: int
    at_ms: int
    time: str
    author: str
    text: str
    hit: bool


class RecallView(msgspec.Struct, frozen=True, kw_only=True):
    """Recall's answer as data (for `--json`): windows in the rank order of their best hit."""

    query: str
    total: int
    shown_hits: int
    more: int
    windows: tuple[tuple[RecallLine, ...], ...]


def _shown(message: ShownMessage, hit: bool, tz: tzinfo) -> RecallLine:
    # `render_message` with no name gives ": text [attachment: ...]".
    body = flatten_line_breaks(render_message("", message.content, message.attachments)[2:])
    most = MESSAGE_BYTES if hit else CONTEXT_BYTES
    if utf8_size(body) > most:
        body = cut_to_bytes(body, most - utf8_size(ELLIPSIS)) + ELLIPSIS
    return RecallLine(
        index=message.index,
        at_ms=message.at_ms,
        time=local_minute(message.at_ms, tz),
        author=flatten_line_breaks(message.author_name),
        text=body,
        hit=hit,
    )


def render_shown(message: RecallLine) -> str:
    """`> [index] HH:MM Name: text`, with `>` only on a hit (its day is on a line above)."""
    mark = ">" if message.hit else " "
    return f"{mark} [{message.index}] {message.time[11:]} {message.author}: {message.text}"


def _visible(message_at: Callable[[int], ShownMessage | None], index: int) -> ShownMessage | None:
    if index < 0:
        return None
    message = message_at(index)
    return None if message is None or message.deleted else message


def _neighbours(
    message_at: Callable[[int], ShownMessage | None], start: ShownMessage, step: int, context: int
) -> list[ShownMessage]:
    """Up to `context` shown messages from `start` in direction `step` in the same turn of
    talk: skipping gone ones, and stopping at a pause longer than `TURN_GAP_MS`."""
    found: list[ShownMessage] = []
    probe = start.index + step
    last = start
    # Walk a bounded distance: a long run of erased messages is not searched through.
    for _ in range(4 * context + 8):
        if len(found) == context:
            break
        message = _visible(message_at, probe)
        if message is not None:
            if abs(message.at_ms - last.at_ms) > TURN_GAP_MS:
                break
            found.append(message)
            last = message
        probe += step
    return found


def _replied(
    message_at: Callable[[int], ShownMessage | None],
    hit: ShownMessage,
    index_of: Callable[[int], int | None],
) -> list[ShownMessage]:
    """The message `hit` replies to, wherever it is, if it is still there."""
    if hit.reply_to is None:
        return []
    parent_index = index_of(hit.reply_to)
    parent = None if parent_index is None else _visible(message_at, parent_index)
    return [parent] if parent is not None and parent.index < hit.index else []


@dataclass(frozen=True, slots=True)
class _Window:
    """Messages shown together (by index), and which of them are hits."""

    messages: dict[int, ShownMessage]
    hits: frozenset[int]
    low: int  # the lowest index it shows
    high: int  # and the highest

    @staticmethod
    def of(messages: dict[int, ShownMessage], hits: frozenset[int]) -> _Window:
        return _Window(messages, hits, min(messages), max(messages))

    def touches(self, other: _Window) -> bool:
        return other.low <= self.high + 1 and self.low <= other.high + 1

    def joined(self, other: _Window) -> _Window:
        return _Window(
            {**self.messages, **other.messages},
            self.hits | other.hits,
            min(self.low, other.low),
            max(self.high, other.high),
        )

    def shown(
        self, tz: tzinfo, made: dict[tuple[int, bool], RecallLine]
    ) -> tuple[RecallLine, ...]:
        """The window's lines, each made once a recall (`made` keeps them by index and mark)."""
        lines = []
        for index in sorted(self.messages):
            key = (index, index in self.hits)
            line = made.get(key)
            if line is None:
                line = made[key] = _shown(self.messages[index], key[1], tz)
            lines.append(line)
        return tuple(lines)


def _with_hit(windows: list[_Window], new: _Window) -> list[_Window]:
    """`windows` with `new` merged into every window it touches, at the best one's place."""
    place = len(windows)
    kept = list(enumerate(windows))
    while True:
        touching = [(rank, window) for rank, window in kept if window.touches(new)]
        if not touching:
            break
        for rank, window in touching:
            place = min(place, rank)
            new = window.joined(new)
        joined = {rank for rank, _ in touching}
        kept = [(rank, window) for rank, window in kept if rank not in joined]
    ranked = sorted([*kept, (place, new)], key=lambda item: item[0])
    return [window for _, window in ranked]


def _window_text(lines: tuple[RecallLine, ...]) -> str:
    """A window's messages, one a line, each day they were posted on a line of its own
    above them (`YYYY-MM-DD`)."""
    shown: list[str] = []
    day = ""
    for message in lines:
        if message.time[:10] != day:
            day = message.time[:10]
            shown.append(day)
        shown.append(render_shown(message))
    return "\n".join(shown)


def _render(query: str, texts: list[str], hits: int, total: int, more: int) -> str:
    """The answer's text from its windows' texts and how many hits they show."""
    if not texts:
        return f'No messages match "{query}".'
    return "\n\n".join(_framed(query, texts, hits, total, more))


def _framed(query: str, texts: list[str], hits: int, total: int, more: int) -> list[str]:
    """The answer's parts: a head line, the windows' texts, and a line on the hits left."""
    head = f'{total} messages match "{query}"; the best {hits}, with context:'
    return [head, *texts, f"... {more} more hits; refine the words"] if more else [head, *texts]


def _rendered_size(query: str, sizes: list[int], hits: int, total: int) -> int:
    """The bytes of `_render` of windows' texts `sizes` bytes long (at least one), without
    making it."""
    frame = _framed(query, [], hits, total, total - hits)
    parts = len(frame) + len(sizes)
    return sum(map(utf8_size, frame)) + sum(sizes) + 2 * (parts - 1)


def recall_view(
    query: str,
    result: SearchResult,
    message_at: Callable[[int], ShownMessage | None],
    *,
    context: int = CONTEXT,
    cap_bytes: int = 8000,
    tz: tzinfo = UTC,
    index_of: Callable[[int], int | None] = lambda _message_id: None,
) -> RecallView:
    """Recall's answer as data: the hits that fit `cap_bytes` as text, with their context.

    A hit's context is the turn of talk around it (up to `context` messages
    each side, none past a long pause) and the message it replies to
    wherever that is (`index_of` finds a Discord message id's index).
    (Looking a few messages ahead for replies to the hit as well was
    measured on scripts/eval_recall.py: it found no more answers and cost
    a read per message looked at.) A hit whose window would pass `cap_bytes` is
    left out and the next ones are tried, until `MISFITS_TRIED` in a row
    did not fit. A hit of score 0 (a message shown for when it was posted,
    not for its words: eva.core.recall_search.longest_within) is shown
    without the hit mark and not counted as one.
    """
    windows: list[_Window] = []
    shown: list[tuple[RecallLine, ...]] = []  # each window's lines
    texts: list[str] = []  # and its text
    sizes: list[int] = []  # and the text's bytes
    shown_hits = misfits = gone = 0
    made: dict[tuple[int, bool], RecallLine] = {}
    for index, score in result.hits:
        matched = score > 0  # a hit of score 0 is shown for its time, not its words
        hit = _visible(message_at, index)
        if hit is None:  # erased since the index held it (sealed with keys destroyed)
            gone += matched
            continue
        turn = context if shown_hits < CONTEXT_HITS else 0
        around = [
            *_neighbours(message_at, hit, -1, turn),
            hit,
            *_neighbours(message_at, hit, 1, turn),
            *_replied(message_at, hit, index_of),
        ]
        new = _Window.of(
            {message.index: message for message in around},
            frozenset((index,)) if matched else frozenset(),
        )
        grown = _with_hit(windows, new)
        # Only the window the hit went into is new; the others keep their lines.
        before = {id(window): place for place, window in enumerate(windows)}
        grown_shown, grown_texts, grown_sizes = [], [], []
        for window in grown:
            place = before.get(id(window))
            if place is None:
                lines = window.shown(tz, made)
                text = _window_text(lines)
                grown_shown.append(lines)
                grown_texts.append(text)
                grown_sizes.append(utf8_size(text))
            else:
                grown_shown.append(shown[place])
                grown_texts.append(texts[place])
                grown_sizes.append(sizes[place])
        counted = shown_hits + matched
        if _rendered_size(query, grown_sizes, counted, result.total) > cap_bytes:
            misfits += 1
            if misfits == MISFITS_TRIED:
                break
            continue
        misfits = 0
        windows, shown, texts, sizes = grown, grown_shown, grown_texts, grown_sizes
        shown_hits = counted
    total = max(result.total - gone, 0)  # a message gone matches nothing any more
    return RecallView(
        query=query,
        total=total,
        shown_hits=shown_hits,
        more=max(total - shown_hits, 0),
        windows=tuple(shown),
    )


def recall_text(
    query: str,
    result: SearchResult,
    message_at: Callable[[int], ShownMessage | None],
    *,
    context: int = CONTEXT,
    cap_bytes: int = 8000,
    tz: tzinfo = UTC,
) -> str:
    """Recall's answer as the tool shows it: hits with context, within `cap_bytes`.

    Each message is one line `[index] YYYY-MM-DD HH:MM Name: text`, hit lines
    marked `>`; windows are apart by a blank line, in the rank order of their
    best hit; the last line says how many more hits there were.
    """
    view = recall_view(query, result, message_at, context=context, cap_bytes=cap_bytes, tz=tz)
    return render_view(view, cap_bytes)


def render_view(view: RecallView, cap_bytes: int) -> str:
    """The text form of a recall answer already worked out."""
    if not view.windows and view.total:
        return f'{view.total} messages match "{view.query}", but none fit in {cap_bytes} bytes.'
    texts = [_window_text(lines) for lines in view.windows]
    hits = sum(message.hit for lines in view.windows for message in lines)
    return _render(view.query, texts, hits, view.total, view.more)
