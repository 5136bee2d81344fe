# How a channel serves a prompt and its other reads, apart from its posts.
#
# Shell (trio; a part of ChannelActor, see eva.live.channel_state). Reads (the prompt, zoom,
# recall, a message's date) and the records of Eva's own calls have an inbox of their own,
# made with the first, and a task of their own, started with the first, so a reply never
# waits behind a burst of posts.
# Invariants: both tasks run on one trio thread, so each read sees a whole state; a read
# keeps the channel awake (not from going quiet); once the actor has stopped, its read inbox
# is closed, so a sender goes to the channel's next actor.
from __future__ import annotations

from collections.abc import Sequence

import trio

from eva.core.prompt import MemoryPrompt, PromptBudget, memory_prompt
from eva.live.inputs import DateOf, GetPrompt, Post, Recall, RecordReply, RecordTool, Zoom
from eva.live.posting import Posting
from eva.live.request import Request
from eva.memory.view import channel_zone, row_lines

READ_INPUTS = (GetPrompt, Zoom, Recall, DateOf, RecordTool, RecordReply)
"""Inputs served apart from posts: reads, and the records of Eva's own calls."""


class Reads(Posting):
    """The part of a channel's actor that serves reads and builds the prompt."""

    def want_reader(self) -> None:
        """A read is queued (the sender calls this before it sends one): start the task
        that serves reads unless it runs; if the loop has not begun, it starts it."""
        if self._readers is not None:
            self._readers.start_soon(self._serve_reads)
            self._readers = None

    def read_inbox(self) -> trio.MemorySendChannel[Request]:
        """Where reads go: made with the first one (closed already once the actor has
        stopped, so a sender finds it so and goes to the channel's next actor)."""
        if self._reads is None:
            send: trio.MemorySendChannel[Request]
            receive: trio.MemoryReceiveChannel[Request]
            send, receive = trio.open_memory_channel(self.shared.live.inbox_capacity)
            self._reads = send, receive
            if self.stopped:
                receive.close()
        return self._reads[0]

    async def _serve_reads(self) -> None:
        assert self._reads is not None  # a read was queued before this task started
        async for request in self._reads[1]:
            try:
                await self._serve(request)
            finally:
                self.reads_pending -= 1
                self.last_read = trio.current_time()
            self._waiting.cancel()  # let the main loop see whether it may sleep now

    def prompt(
        self, ahead: Sequence[Post] = (), budget: PromptBudget | None = None
    ) -> MemoryPrompt:
        """The memory as Eva's prompt uses it now, with the posts of `ahead` that the tail
        does not hold yet after it (see GetPrompt), fitted to `budget` if one is given.

        The tail comes in chunks that end where earlier prompts of this row ended,
        and this prompt's end is remembered for the next (see MemoryPrompt).
        """
        store, settings = self.shared.store, self.shared.settings
        meta = self._meta()
        tz = channel_zone(meta, settings)
        lines = row_lines(store, self.stream, tz, self.row_text, self.sizes)
        self.tail.follow(store, self.stream, meta, tz)
        tail = self.tail.lines
        if ahead:  # stored or not, at the indexes they have or will get
            places = self._places(ahead)
            at = [None if place is None else place.at for place in places]
            tail = tail + self.tail.lines_after(list(zip(ahead, at, strict=True)), tz)
        memory = memory_prompt(
            lines, tail, settings.prompt_tail_max_bytes, budget, self.tail.cuts
        )
        if memory.tail_end:
            self.tail.ended_prompt(memory.tail_end)
        return memory
