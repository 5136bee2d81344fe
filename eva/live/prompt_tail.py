# The tail an awake actor keeps rendered, so serving a prompt reads no messages.
#
# Shell (it reads the store when the tail must be loaded: at the first prompt
# after the channel wakes, or after it was dropped). The tail holds the
# rendered lines of the messages from the row's frontier on; stored posts are
# added as they land, a publish cuts what moved into the row, and an edit,
# a deletion or a forget drops it whole (`forget`), to be read again when next
# asked. Invariants: once loaded, `lines` are the messages start .. end-1 that
# are not erased, in index order; `end` is past every index it holds.
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

from eva.core.block import ShownMessage, message_line, tail_lines
from eva.core.keys import StreamId
from eva.core.state import StreamMeta
from eva.live.inputs import Post
from eva.memory.view import tail_messages
from eva.store.event_store import EventStore


def shown_post(post: Post, index: int) -> ShownMessage:
    """A post as the tail shows it."""
    return ShownMessage(
        index=index,
        at_ms=post.at_ms,
        author_name=post.author_name,
        content=post.content,
        attachments=post.attachments,
    )


@dataclass(slots=True)
class PromptTail:
    """The tail as the prompt shows it, kept in memory while the actor is awake."""

    start: int = -1  # the row frontier it begins at; -1 when not loaded
    end: int = 0  # the index of the first message it does not hold yet
    lines: list[tuple[int, str]] = field(default_factory=list)  # (index, rendered line)
    cuts: list[int] = field(default_factory=list)
    """Where the prompts since the row's publish ended (an index past their last line):
    the next prompt's tail is cut in chunks there, so it repeats their cached prefix."""

    def forget(self) -> None:
        """Drop what it holds: a message under it changed; it is read again when needed."""
        self.start = -1
        self.cuts = []

    def ended_prompt(self, end: int) -> None:
        """A prompt's tail ended before message `end`."""
        if not self.cuts or end > self.cuts[-1]:
            self.cuts.append(end)

    def add(self, posts: Iterable[tuple[Post, int | None]], tz: tzinfo) -> None:
        """Posts just stored, with their indexes (None: already stored before)."""
        if self.start < 0:
            return
        for post, index in posts:
            if index is not None and index >= self.end:  # a reload may hold it
                self.lines.append((index, message_line(shown_post(post, index), tz)))
                self.end = index + 1

    def follow(
        self, store: EventStore, stream: StreamId, meta: StreamMeta | None, tz: tzinfo
    ) -> None:
        """Begin at the row's frontier: cut what a publish moved into the row, or read
        the tail again when it is not loaded."""
        frontier = meta.row_frontier if meta is not None else 0
        if self.start < 0 or frontier < self.start:
            lines = tail_lines(tail_messages(store, stream), tz)
            messages = meta.messages if meta is not None else 0
            self.start, self.lines, self.cuts = frontier, lines, []
            self.end = max(messages, lines[-1][0] + 1) if lines else messages
        elif frontier > self.start:
            self.start, self.lines = frontier, [line for line in self.lines if line[0] >= frontier]
            self.cuts = []

    def lines_after(
        self, posts: Sequence[tuple[Post, int | None]], tz: tzinfo
    ) -> list[tuple[int, str]]:
        """Lines of the posts it does not hold yet, at the indexes they have or will get."""
        return [
            (index, message_line(shown_post(post, index), tz))
            for post, index in posts
            if index is not None and index >= self.end
        ]
