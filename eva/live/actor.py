# One guild channel's actor: a loop over its inbox that serves each input in turn.
#
# Shell (trio). The actor is the parts of eva.live.channel_state's list together; this
# module holds only its loop: take the next input (or wake on the next timer), store the
# posts queued together in one batch, serve anything else once the posts before it are
# stored, and stop when idle with nothing pending.
# Invariants: the inbox is bounded (a burst slows senders down, nothing is dropped); a
# channel's inputs are served in the order they came, posts before the input behind them;
# the actor leaves the supervisor's registry with no await between deciding to sleep and
# leaving, so no input is left in a closed inbox.
from __future__ import annotations

from collections.abc import Callable

import trio

from eva.live.inputs import Post
from eva.live.posting import POST_BATCH
from eva.live.request import CompressionDone, Request
from eva.live.sleep import Sleeping


class ChannelActor(Sleeping):
    """The actor of one guild channel."""

    async def run(self, on_sleep: Callable[[ChannelActor], None]) -> None:
        """Serve inputs until idle with nothing pending; then call `on_sleep` and return.

        A second task serves reads (the prompt, zoom, recall, date) and the
        records of Eva's own calls, so a reply never waits behind a burst of
        posts; both tasks run on one trio thread, so each read sees a whole state.
        It starts with the first read (`want_reader`): most channels woken
        together are woken by posts, and a task fewer makes each wake cheaper.
        """
        await self._wake()
        try:
            async with self.receive, trio.open_nursery() as nursery:
                self._readers = nursery
                if self.reads_pending:
                    self.want_reader()
                while not self._may_sleep():
                    if self._refused:
                        await self._settle_posts()
                    if self._overflowing:
                        self._overflowing = False
                        await self._after_posts(None)
                    request = None
                    deadline = self._next_deadline()
                    with trio.move_on_at(deadline) as self._waiting:
                        self._serving = False
                        request = await self.receive.receive()
                    self._serving = True
                    if request is not None:
                        self.inbox_pending -= 1
                    if request is None:
                        await self._on_timer()
                    elif isinstance(request.item, Post):
                        await self._serve_posts(request)
                    else:
                        await self._serve_after_posts(request)
                on_sleep(self)  # no await between the check and leaving the registry
                self.stopped = True
                self._readers = None
                nursery.cancel_scope.cancel()
        finally:
            if self._reads is not None:  # a read sent from now on finds the inbox closed
                self._reads[1].close()

    async def _serve_posts(self, first: Request) -> None:
        """Serve a post and the posts queued right behind it, stored in one commit."""
        batch = [first]
        after: Request | None = None
        while len(batch) < POST_BATCH:
            try:
                queued = self.receive.receive_nowait()
            except trio.WouldBlock:
                break
            self.inbox_pending -= 1
            if not isinstance(queued.item, Post):
                after = queued
                break
            batch.append(queued)
        await self._send_posts(batch)
        if after is not None:
            await self._serve_after_posts(after)

    async def _serve_after_posts(self, request: Request) -> None:
        """Serve an input other than a post once the posts before it are stored (a
        compression run's end needs no wait: it is not the channel's input)."""
        if not isinstance(request.item, CompressionDone):
            await self._settle_posts()
        await self._serve(request)
