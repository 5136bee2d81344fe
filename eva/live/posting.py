# How a channel's posts are stored: pipelined to the writer, answered as their commits land.
#
# Shell (trio; a part of ChannelActor, see eva.live.channel_state). The actor hands a batch
# to the writer and takes the next in while it is committed (up to POSTS_IN_FLIGHT posts),
# each answered when its commit is; every other input of the channel waits until the posts
# before it are stored. Posts that come while the channel's last batch still waits for the
# writer to take it join that batch, so a channel's posts go in one append whenever the
# writer is behind, and one by one, at once, when it is not. While the actor waits for input
# with nothing of its channel queued, posts skip the inbox: the sender's task hands them to
# the writer itself (`post_now`), with the actor's state, as the actor would have; a post
# costs no turn of the actor's task then. Where each post goes is decided in the pure core
# (eva.core.places).
# Invariants: the inbox is bounded (a burst slows senders down, nothing is dropped); a
# batch the commit refuses (a repeat of a message stored before) is served again one
# post at a time, reading the store, so only the post that does not fit fails.
from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from eva.core.channel_timers import is_idle
from eva.core.events import AnyEvent, MessagePosted
from eva.core.places import Place, next_free_index, place_posts
from eva.core.projection import Rejected
from eva.core.state import StreamMeta, decode_meta
from eva.core.timing import overflow_due
from eva.live.channel_state import _InFlight
from eva.live.compressing import Compressing
from eva.live.inputs import Post, posted_event
from eva.live.request import Request
from eva.memory.view import channel_zone
from eva.store.event_store import Appended, StoredMessage

log = logging.getLogger("eva.live.actor")  # the channel actor's log, whichever part of it speaks

POST_BATCH = 256
"""Most posts stored in one commit when they queue up for one channel."""

POSTS_IN_FLIGHT = 64
"""A channel hands posts to the writer while fewer than this many of its posts wait for
their commit. Many channels with a message now and then each send theirs at once; a
channel in a burst has about a batch in flight, the rest waiting in its inbox and its
sender's lane, so a flood slows its sender down instead of piling up in commits."""


class Posting(Compressing):
    """The part of a channel's actor that stores posts."""

    async def _send_posts(self, batch: list[Request]) -> None:
        """Hand a batch of posts to the writer; `_landed` answers them once committed.

        Waits for the oldest batches in flight while POSTS_IN_FLIGHT posts are. A post
        already in flight again (Discord sent it twice) waits for it to land,
        so it is answered as stored before.
        """
        posts = [request.item for request in batch if isinstance(request.item, Post)]
        if self._refused or any(post.message_id in self._in_flight_ids for post in posts):
            await self._settle_posts()
        flight = self._take_off(batch, posts)
        if flight is not None:
            try:
                flight.queued = await self.shared.writer.append_later(
                    self.stream, flight.events, lambda outcome: self._landed(flight, outcome)
                )
            except Exception as error:  # not queued: the writer is closing
                self._land(flight)
                self._failed_posts(batch, error)
                return
        while self._posts_in_flight >= POSTS_IN_FLIGHT:
            await self._in_flight[0].wait_answered()

    def post_now(self, batch: list[Request]) -> bool:
        """Hand posts to the writer from the sender's task, as `_send_posts` would.

        Only while the loop waits for input, or has not started yet, and
        nothing is queued for it (so nothing of the channel is ahead of them),
        no post of theirs is in flight, they take the posts in flight to
        POSTS_IN_FLIGHT at most, and the writer has room; False, with nothing
        done, when they must go through the inbox.
        """
        if (
            self._serving
            or self.inbox_pending
            or self.stopped
            or self._refused
            or self._overflowing
            or self._posts_in_flight + len(batch) > POSTS_IN_FLIGHT
        ):
            return False
        if len(batch) == 1:  # the common case, with no list made to check it
            post = batch[0].item
            if not isinstance(post, Post) or post.message_id in self._in_flight_ids:
                return False
            posts = [post]
        else:
            posts = [request.item for request in batch if isinstance(request.item, Post)]
            if len(posts) != len(batch) or any(
                post.message_id in self._in_flight_ids for post in posts
            ):
                return False
        flight = self._take_off(batch, posts)
        if flight is None:
            return True  # answered already, or joined the last batch
        flight.queued = self.shared.writer.append_later_nowait(
            self.stream, flight.events, lambda outcome: self._landed(flight, outcome)
        )
        if flight.queued is None:
            self._land(flight)  # the writer is full: back out, and wait in the inbox
            return False
        return True

    def _take_off(self, batch: list[Request], posts: list[Post]) -> _InFlight | None:
        """Give the posts their indexes and put them in flight: a new batch, for the
        caller to queue its events, or None when there is nothing to queue (each is
        answered already, or they joined the last batch, still waiting for the writer)."""
        end = self._next_index
        if end is not None and len(posts) == 1 and posts[0].message_id not in self._in_flight_ids:
            post = posts[0]  # the common case: one new post, its index known (see `_places`)
            indexes: list[int | None] = [end]
            events: list[AnyEvent] = [posted_event(post, end)]
            self._touch(post.at_ms)
            self._in_flight_ids[post.message_id] = end
            end += 1
        else:
            try:
                indexes, events = self._new_posts(posts, unread=True)
            except Exception as error:  # a store that cannot be read must not stop the channel
                self._failed_posts(batch, error)
                return None
            if not events:
                for request, index in zip(batch, indexes, strict=True):
                    request.reply(index)
                return None
            self._touch(max(post.at_ms for post in posts))
            end = 0
            for post, index in zip(posts, indexes, strict=True):
                if index is not None:  # new posts take the next indexes in order: the last ends
                    self._in_flight_ids[post.message_id] = index
                    end = index + 1
        self._next_index = end
        self._posts_in_flight += len(batch)
        last = self._in_flight[-1] if self._in_flight else None
        if last is not None and last.queued is not None and self.shared.writer.join(
            last.queued, events
        ):
            last.requests.extend(batch)
            last.posts.extend(posts)
            last.indexes.extend(indexes)
            last.events.extend(events)
            last.end = end
            return None
        flight = _InFlight(list(batch), posts, indexes, events, end)  # the sender's list stays
        self._in_flight.append(flight)
        return flight

    def _landed(self, flight: _InFlight, outcome: Appended | BaseException) -> None:
        """A batch's commit is answered (called by the writer, in commit order)."""
        self._land(flight)
        if isinstance(outcome, Rejected):  # one of them does not fit: one by one, so only it fails
            self._next_index = None  # the batches behind it read the store again
            self._refused.extend(flight.requests)
            self._call_loop()
            return
        if isinstance(outcome, BaseException):
            self._failed_posts(flight.requests, outcome)
            return
        meta: StreamMeta | None = None
        try:
            meta = self._stored(flight.posts, flight.indexes, flight.events, outcome.meta)
        except Exception:  # they are stored: they are answered so; the tail is read again
            self.shared.crashes += 1
            log.exception(
                "channel %s failed after storing %d posts", self.stream, len(flight.events)
            )
            self.tail.forget()
            self.unleafed.clear()
        for request, index in zip(flight.requests, flight.indexes, strict=True):
            request.reply(index)
        if not self._in_flight and is_idle(
            trio.current_time(), self._last_active(), self.shared.live.idle_seconds
        ):
            self._waiting.cancel()  # idle while these were committed: it may sleep now
        if meta is None or self.stopped:
            return
        if overflow_due(meta, self.shared.settings):
            self._overflowing = True  # the loop publishes; a publish needs awaits
            self._call_loop()
        else:
            self._maybe_compress(meta=meta)

    def _land(self, flight: _InFlight) -> None:
        """Take a batch out of flight."""
        flight.queued = None  # its append's callback holds it: no cycle left for the collector
        self._in_flight.remove(flight)  # the oldest, but for a batch never queued
        self._posts_in_flight -= len(flight.requests)
        for post, index in zip(flight.posts, flight.indexes, strict=True):
            if index is not None:
                self._in_flight_ids.pop(post.message_id, None)
        flight.answer()

    def _failed_posts(self, requests: list[Request], error: BaseException) -> None:
        self._next_index = None
        self.shared.crashes += 1
        log.error("channel %s failed on %d posts: %s", self.stream, len(requests), error)
        for request in requests:
            request.reply(error=error)

    async def _settle_posts(self) -> None:
        """Wait until every batch in flight is answered, then serve the refused posts."""
        while self._in_flight:
            await self._in_flight[-1].wait_answered()
        refused, self._refused = self._refused, []
        for request in refused:
            await self._serve(request)

    def _places(self, posts: Sequence[Post], unread: bool = False) -> list[Place | None]:
        """Where each post is stored, or goes if stored next; None for a repeat of one before.

        With `unread`, while the next index is known (`_next_index`), the store is
        not read: a post stored before this actor last read it is then taken for a
        new one, and the commit refuses its batch (each is then served
        alone, and answered as stored before). Each post in flight is still found.
        """
        message_ids = [post.message_id for post in posts]
        next_known = self._next_index if unread else None
        if next_known is not None:
            found = self._in_flight_ids.get
            stored: list[int | None] = [found(message_id) for message_id in message_ids]
            next_index = next_known
        else:
            meta, stored = self.shared.store.meta_and_indexes(self.stream, message_ids)
            if self._in_flight:  # posts handed to the writer have their indexes already
                stored = [
                    self._in_flight_ids.get(message_id) if at is None else at
                    for message_id, at in zip(message_ids, stored, strict=True)
                ]
            next_index = next_free_index(
                meta.messages if meta is not None else 0,
                stored,
                self._in_flight[-1].end if self._in_flight else 0,
            )
        return place_posts(message_ids, stored, next_index)

    def _new_posts(
        self, posts: list[Post], unread: bool = False
    ) -> tuple[list[int | None], list[AnyEvent]]:
        """Each post's index (None if stored before), and the events that store the new
        (`unread`: see `_places`)."""
        indexes = [
            None if place is None or place.stored else place.at
            for place in self._places(posts, unread)
        ]
        events: list[AnyEvent] = [
            posted_event(post, index)
            for post, index in zip(posts, indexes, strict=True)
            if index is not None
        ]
        return indexes, events

    async def _posts(self, posts: list[Post]) -> tuple[list[int | None], StreamMeta | None]:
        """Store posts (in one append); each gets its index, or None if already stored.

        With the indexes comes the stream's record once they are stored (None if
        none was new).
        """
        self._next_index = None  # read the store; posts to come read it again
        indexes, events = self._new_posts(posts)
        if not events:
            return indexes, None
        appended = await self._write(events)
        self._touch(max(post.at_ms for post in posts))
        return indexes, self._stored(posts, indexes, events, appended.meta)

    def _stored(
        self,
        posts: Sequence[Post],
        indexes: list[int | None],
        events: list[AnyEvent],
        record: bytes | None,
    ) -> StreamMeta:
        """Keep up with posts just stored (their unleafed messages, the tail); returns
        the stream's record as they left it (`record`, the append's, or read if None)."""
        for event in events:
            if isinstance(event, MessagePosted):
                self.unleafed[event.index] = StoredMessage(
                    event, event.content, event.attachments, event.edited_at_ms, False
                )
        meta = decode_meta(record) if record is not None else self._meta()
        assert meta is not None
        tz = channel_zone(meta, self.shared.settings)
        self.tail.add(zip(posts, indexes, strict=True), tz)
        self.sizes.use_zone(tz)  # lines are measured as they are written, from the first
        return meta

    async def _after_posts(self, meta: StreamMeta | None) -> None:
        """What stored posts set going: a publish if the tail overflows, compression.

        Run once their senders have their answers, which need neither; `meta` is
        the stream's record read since they were stored (None: read it now)."""
        meta = meta or self._meta()
        if meta is None:
            return
        if overflow_due(meta, self.shared.settings):
            await self._maybe_publish()
            self._maybe_compress()  # the publish moved the record on
            return
        self._maybe_compress(meta=meta)
