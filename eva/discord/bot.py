# The running bot: hikari's GatewayBot under trio-asyncio, feeding the channel actors.
#
# Shell. hikari is asyncio; the store, the supervisor and the model client are trio. hikari
# runs on trio-asyncio's loop inside the same thread, and its calls are bridged with
# `aio_as_trio`; never `bot.run()`. It may not know the memory's rules: it turns gateway
# events into inputs with eva.discord.mapping and hands them to `Supervisor.ask`.
#
# Ordering: message events (created, edited, deleted, bulk-deleted) are read from the
# gateway's raw payloads, which hikari's event manager hands to one listener
# (ShardPayloadEvent) in the order the shard received them. hikari starts one asyncio task
# per listener, in that order, and each task's first step runs in creation order; the
# listener never awaits before it maps the event and puts it on its channel's *lane*
# (eva.discord.lanes), so each lane holds its channel's events in Discord's order. hikari's
# typed listeners serve the rest (ready, guilds, interactions). One trio task per lane
# submits them to the actor in
# that order (the messages that arrived together at once, so the actor stores them in one
# commit), so a channel's messages reach its actor (and the log) in the order Discord sent
# them. While a lane's task waits with nothing queued, a message skips the lane: the
# listener hands it to the actor at once (Supervisor.post_now), which costs no turn of
# the lane's task. Answers are taken as they come (Request.on_answer), so a lane's next
# messages go while the ones before are being stored; an edit, a deletion or a history
# fetch waits until the messages ahead of it are answered, since it reads what is stored.
# Lanes of different channels run side by side. Backfill runs as a job on the lane too,
# so history fetched over REST is stored in order with the live events queued behind it;
# duplicates are answered None by the actor and skipped.
#
# Answering: a live message that asks Eva is answered at once, while it and the posts
# ahead of it are still being stored: the prompt shows those posts from the lane, so a
# reply never waits behind the channel's backlog. When an edit, a deletion or a history
# fetch is ahead of it, or Eva is offline (she quotes the store), it is answered once
# stored instead.
#
# Invariants: Eva answers a message only if she claimed it (`claim`): never one stored
# before, never one claimed and not yet stored, and from history only one she has not
# replied to there; so a message seen twice (gateway resume, backfill, a restart after a
# reply went out) is never answered twice. Her replies never ping @everyone or roles, only
# the asker; on a stop signal the gateway closes first, the lanes drain, then the
# supervisor's writer finishes its commits.
from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import anthropic
import hikari
import msgspec
import trio

from eva.core.channel_timers import next_retry_delay
from eva.core.keys import StreamId
from eva.core.settings import ModelSettings
from eva.discord.answer import Answerer
from eva.discord.bot_context import BotContext
from eva.discord.bridge import aio, run_trio
from eva.discord.history import History, RestPages, Stored
from eva.discord.lanes import Backfill, Change, Ingest, Job, Lane, StoreAgain
from eva.discord.mapping import (
    delete_of,
    edit_of,
    stream_of,
)
from eva.discord.messages import mention_names
from eva.discord.payloads import PayloadError, asks_eva, chat_post, chat_stream
from eva.discord.reply_sender import ReplySender
from eva.live.inputs import Delete, Describe, Edit, Post
from eva.live.request import Request
from eva.live.supervisor import Supervisor, wall_clock_ms
from eva.store.opt_outs import opted_out
from eva.store.switches import Switches

log = logging.getLogger(__name__)

T = TypeVar("T")

COMMANDS_MODULE = "eva.discord.commands"
COMMIT_FAILURES = (OSError,)
"""What a commit that failed as a whole raises (the disk refused): nothing of it landed,
so its posts are stored again."""
NO_COMMANDS_TEXT = "Commands are not available yet."
CLOSE_TIMEOUT_S = 5.0
DRAIN_TIMEOUT_S = 5.0
READY_TIMEOUT_S = 30.0
LANE_BATCH = 256
"""Most messages of one channel submitted together."""


def _commands() -> ModuleType | None:
    try:
        return importlib.import_module(COMMANDS_MODULE)
    except ModuleNotFoundError as error:
        if error.name != COMMANDS_MODULE:
            raise
        return None


UNKEPT_QUESTIONS = 512
"""Questions of people kept out whose replies the bot remembers not to keep."""
MESSAGE_EVENTS = frozenset(
    {"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE", "MESSAGE_DELETE_BULK"}
)
"""The gateway events Eva reads from raw payloads."""


def _deletes(job: Job) -> bool:
    return isinstance(job, Change) and isinstance(job.item, Delete)


class EvaBot:
    """One process's bot: hikari's events in, the actors' answers and Eva's replies out."""

    def __init__(
        self,
        bot: hikari.GatewayBot,
        eva_id: int,
        supervisor: Supervisor,
        client: anthropic.AsyncAnthropic | None,
        models: ModelSettings,
        data_dir: Path,
        nursery: trio.Nursery,
        on_stored: Stored | None = None,
        replies: ReplySender | None = None,
    ) -> None:
        self.bot = bot
        self.supervisor = supervisor
        self.store = supervisor.shared.store
        self.client = client
        self.models = models
        self.data_dir = data_dir
        self.eva_id = eva_id
        self.eva_name = "Eva"
        self.on_stored = on_stored
        self.answerer = Answerer(bot, supervisor, client, models, eva_id, replies)
        self._nursery = nursery
        # The context the bot was made in (under trio-asyncio's loop): a stored question's
        # answer starts in it, though the commit that stored it is answered elsewhere.
        self._context = contextvars.copy_context()
        self._lanes: dict[StreamId, Lane] = {}
        self._claimed: set[int] = set()  # messages Eva answers, until they are stored
        self.history = History(self, RestPages(bot.rest))
        self._lane_tasks = 0
        self._lanes_idle = trio.Event()
        self._lanes_idle.set()
        self._closing = False
        self._stop = trio.Event()
        self._ready_shards = 0
        self._ready = trio.Event()
        self._expected_shards = 1
        self.shard_ids: list[int] | None = None  # the shards it runs; None: Discord's advice
        self.health_port: int | None = None  # where it answers /livez and /readyz, if it does
        self._command_guilds = tuple(supervisor.shared.live.command_guilds)
        self.switches = Switches(self.store, supervisor.shared.live.listen)
        self.opted_out = opted_out(self.store)  # changed by /dont-remember-me, /remember-me
        # Questions of people kept out that Eva answers: her reply quotes them, so it is
        # not kept either (the newest few hundred, until the reply comes back).
        self._unkept_questions: deque[int] = deque(maxlen=UNKEPT_QUESTIONS)
        self._application_id = 0
        self.context = BotContext(
            supervisor=supervisor,
            store=self.store,
            eva_id=self.eva_id,
            run_trio=run_trio,
            model_settings=models,
            memory_settings=supervisor.shared.settings,
            backfill=self.backfill,
            rest=bot.rest,
            data_dir=data_dir,
            switches=self.switches,
            opted_out=self.opted_out,
        )
        for kind, listener in (
            (hikari.ShardReadyEvent, self._on_ready),
            (hikari.GuildAvailableEvent, self._on_guild_available),
            (hikari.GuildJoinEvent, self._on_guild_join),
            (hikari.GuildLeaveEvent, self._on_guild_leave),
            (hikari.InteractionCreateEvent, self._on_interaction),
            (hikari.ShardPayloadEvent, self._on_payload),
        ):
            bot.subscribe(kind, listener)

    # -- running --------------------------------------------------------------------

    async def start(self, shard_ids: Sequence[int] | None, shard_count: int | None) -> None:
        """Connect the gateway; return once every shard is ready and commands are registered."""
        self._expected_shards = len(shard_ids) if shard_ids else (shard_count or 1)
        ids = None if shard_ids is None else list(shard_ids)
        self.shard_ids = ids if ids else (list(range(shard_count)) if shard_count else None)
        await aio(
            lambda: self.bot.start(shard_ids=ids, shard_count=shard_count, check_for_updates=False)
        )
        with trio.move_on_after(READY_TIMEOUT_S):
            await self._ready.wait()
        await self._register_commands(list(self._command_guilds))  # none: globally

    def stop(self) -> None:
        """Ask the bot to stop: `run_bot` then closes the gateway, drains and returns."""
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for."""
        return self._stop.is_set()

    async def close(self) -> None:
        """Close the gateway, then let every lane store what it already received."""
        with trio.CancelScope(shield=True):
            with (
                trio.move_on_after(CLOSE_TIMEOUT_S),
                contextlib.suppress(hikari.ComponentStateConflictError),
            ):
                await aio(self.bot.close)
            self._closing = True
            for lane in self._lanes.values():
                lane.close()
            with trio.move_on_after(DRAIN_TIMEOUT_S):
                await self._lanes_idle.wait()

    # -- listeners (asyncio; they enqueue before any await) ------------------------------

    async def _on_ready(self, event: hikari.ShardReadyEvent) -> None:
        self.eva_id = self.context.eva_id = int(event.my_user.id)
        self.eva_name = event.my_user.global_name or event.my_user.username
        self.answerer.eva_name = self.eva_name
        self._application_id = int(event.application_id)
        self._ready_shards += 1
        if self._ready_shards >= self._expected_shards:
            self._ready.set()

    async def _on_guild_available(self, event: hikari.GuildAvailableEvent) -> None:
        await self._back_in(int(event.guild_id))
        channels: list[hikari.GuildChannel] = [*event.channels.values(), *event.threads.values()]
        for channel in channels:
            if isinstance(channel, hikari.TextableGuildChannel):
                self._enqueue(stream_of(event.guild_id, channel.id), Backfill(forced=False))

    async def _on_guild_join(self, event: hikari.GuildJoinEvent) -> None:
        await self._back_in(int(event.guild_id))
        if self._ready.is_set() and int(event.guild_id) in self._command_guilds:
            await run_trio(lambda: self._register_commands([int(event.guild_id)]))

    async def _on_guild_leave(self, event: hikari.GuildLeaveEvent) -> None:
        """Removed from a server (not an outage): its data is owed an erasure after the
        grace period (eva.store.guild_erasure)."""
        guild_id = int(event.guild_id)
        await run_trio(lambda: self.supervisor.left_server(guild_id))

    async def _back_in(self, guild_id: int) -> None:
        if self.supervisor.left_pending(guild_id):  # most servers: no hop into trio at all
            await run_trio(lambda: self.supervisor.back_in_server(guild_id))

    async def _on_payload(self, event: hikari.ShardPayloadEvent) -> None:
        """A message event from the gateway, mapped and queued on its lane before this
        awaits anything; other payloads are hikari's typed listeners' to serve."""
        name = event.name
        if name not in MESSAGE_EVENTS:
            return
        payload = event.payload
        try:
            if name == "MESSAGE_CREATE":
                self._take_created(payload)
            elif name == "MESSAGE_UPDATE":
                self._take_edited(event.shard, payload)
            elif payload.get("guild_id") is not None:  # a deletion: direct messages are not kept
                ids = payload["ids"] if name == "MESSAGE_DELETE_BULK" else [payload["id"]]
                delete = delete_of([int(i) for i in ids], wall_clock_ms())
                self._enqueue(stream_of(payload["guild_id"], payload["channel_id"]), Change(delete))
        except (PayloadError, KeyError, ValueError, TypeError, AttributeError) as error:
            log.warning("a %s event from Discord was left out: %r", name, error)
        except Exception:  # never into the shard's loop: the connection must go on
            log.exception("a %s event from Discord failed: %r", name, payload.get("id"))

    def _take_created(self, payload: Mapping[str, Any]) -> None:
        """A message created: read from the raw payload (hikari's models cost more than
        storing it)."""
        post = chat_post(payload, self.eva_id, self.eva_name)
        if post is None:
            return
        asks = asks_eva(payload, self.eva_id)
        stream = chat_stream(payload)
        if not self.switches.keeps(stream):
            return  # her memory is off here: nothing kept, nothing answered
        if self.opted_out(stream.guild_id, post.author_id):
            if asks:  # read to answer it, never kept: the question is only in the prompt
                self._unkept_questions.append(post.message_id)
                self._context.run(lambda: self._nursery.start_soon(
                    partial(self.answerer.answer, stream, post, (post,))
                ))
            return
        if post.author_id == self.eva_id and post.reply_to in self._unkept_questions:
            return  # her answer to someone kept out: it quotes what they asked
        if asks:
            self._take_question(stream, post)
        else:
            self._enqueue(stream, Ingest(post))

    def _take_edited(self, shard: hikari.api.GatewayShard, payload: Mapping[str, Any]) -> None:
        """A message edited, read through hikari's models as its listeners would get it."""
        if payload.get("guild_id") is None:
            return
        event = self.bot.event_factory.deserialize_message_update_event(
            shard, payload, old_message=None
        )
        message = event.message
        if not isinstance(message.content, str):
            return
        names = mention_names(message.user_mentions, self.eva_id, self.eva_name)
        attachments = message.attachments
        known = isinstance(attachments, Sequence)
        files = [a.filename for a in attachments] if isinstance(attachments, Sequence) else []
        edited = message.edited_timestamp
        edit = edit_of(
            message_id=message.id,
            content=message.content,
            edited_at=edited if isinstance(edited, datetime) else None,
            now_ms=wall_clock_ms(),
            attachment_filenames=files,
            mention_names=names,
        )
        self._enqueue(stream_of(payload["guild_id"], payload["channel_id"]), Change(edit, known))

    async def _on_interaction(self, event: hikari.InteractionCreateEvent) -> None:
        commands = _commands()
        handle = getattr(commands, "handle_interaction", None)
        if handle is not None:
            await handle(event.interaction, self.context)
            return
        interaction = event.interaction
        if isinstance(interaction, hikari.CommandInteraction | hikari.ComponentInteraction):
            await interaction.create_initial_response(
                hikari.ResponseType.MESSAGE_CREATE,
                NO_COMMANDS_TEXT,
                flags=hikari.MessageFlag.EPHEMERAL,
            )

    # -- lanes (trio) -------------------------------------------------------------------

    def _enqueue(self, stream: StreamId, job: Job) -> Lane | None:
        """Put a job on its channel's lane, in order; safe from asyncio listeners.

        Returns the lane, or None when the bot is closing and the job was dropped.
        """
        if self._closing or not (self.switches.keeps(stream) or _deletes(job)):
            # closing, or a channel Eva does not keep: nothing of it is stored (a deletion
            # still goes through: it erases what was kept before the channel was off)
            if isinstance(job, Backfill):
                job.done.set()
            return None
        lane = self._lanes.get(stream)
        if lane is None:
            lane = self._lanes[stream] = Lane()
            if self._lane_tasks == 0:
                self._lanes_idle = trio.Event()
            self._lane_tasks += 1
            self._nursery.start_soon(self._run_lane, stream, lane)
        if isinstance(job, Ingest) and lane.idle():
            lane.track(job)  # skips the lane: nothing of the channel is ahead of it
            request = Request(job.post, on_answer=partial(self._answered, stream, lane, job))
            lane.submitted(1)
            if self.supervisor.post_now(stream, [request]):
                return lane
            lane.answered()
            lane.untrack(job)  # not taken: it goes through the lane
        lane.put(job)
        return lane

    def _take_question(self, stream: StreamId, post: Post) -> None:
        """Queue a live message that asks Eva, and answer it if it is hers to answer: at once
        when only posts are ahead of it in its lane, else once it is stored. Offline, Eva
        quotes what recall finds in the store, so she waits for it to be stored."""
        if not self.claim(stream, post):
            self._enqueue(stream, Ingest(post))
            return
        lane = self._lanes.get(stream)
        at_once = self.client is not None and (lane is None or lane.others == 0)
        lane = self._enqueue(stream, Ingest(post, answer=not at_once, claimed=True))
        if lane is None:
            self.unclaim(post)
        elif at_once:
            ahead = tuple(lane.unstored)  # the question last
            self._nursery.start_soon(self.answerer.answer, stream, post, ahead)

    def claim(self, stream: StreamId, post: Post) -> bool:
        """Take the right to answer a message: False if it was stored before or is claimed
        already. The claim is dropped (`unclaim`) once the message is stored."""
        message_id = post.message_id
        if message_id in self._claimed or self.store.index_of(stream, message_id) is not None:
            return False
        self._claimed.add(message_id)
        return True

    def unclaim(self, post: Post) -> None:
        self._claimed.discard(post.message_id)

    def answer_soon(self, stream: StreamId, question: Post) -> None:
        """Answer a stored question in the background."""
        self._context.run(lambda: self._nursery.start_soon(self.answerer.answer, stream, question))

    async def _run_lane(self, stream: StreamId, lane: Lane) -> None:
        try:
            async with lane.receive:
                await self._describe(stream)
                while (job := await lane.take()) is not None:
                    batch = [job]
                    while isinstance(batch[-1], Ingest) and len(batch) < LANE_BATCH:
                        if (queued := lane.take_nowait()) is None:
                            break
                        batch.append(queued)
                    await self._do_all(stream, lane, batch)
                    await self._store_failed_again(stream, lane)
            await lane.all_answered()
        finally:
            self._lane_tasks -= 1
            if self._lane_tasks == 0:
                self._lanes_idle.set()

    async def _do_all(self, stream: StreamId, lane: Lane, batch: list[Job]) -> None:
        """Do a lane's jobs in order: the posts first (every job but maybe the last),
        submitted together and answered as they are stored; the other job once they are."""
        ingests = [job for job in batch if isinstance(job, Ingest)]
        if ingests:
            lane.submitted(len(ingests))
            requests = await self.supervisor.submit_all(stream, [one.post for one in ingests])
            for ingest, request in zip(ingests, requests, strict=True):
                request.when_answered(partial(self._answered, stream, lane, ingest))
        for job in batch[len(ingests) :]:
            assert not isinstance(job, Ingest)
            await lane.all_answered()  # it reads what is stored: the posts ahead are, first
            try:
                if isinstance(job, StoreAgain):
                    await self._store_failed_again(stream, lane)
                else:
                    await self._do(stream, job)
            except Exception:  # one bad event must not stop the channel
                log.exception("channel %s failed on %r", stream, job)
            finally:
                self._done(lane, job)
                if isinstance(job, Backfill):
                    job.done.set()

    def _answered(self, stream: StreamId, lane: Lane, ingest: Ingest, request: Request) -> None:
        """A post's answer: tell the watcher, answer a question, mark it done; a post whose
        commit the machine refused (a full disk) stays not done, to be stored again."""
        try:
            index = request.answered()
        except COMMIT_FAILURES as error:
            if not lane.failed:
                self._enqueue(stream, StoreAgain())
            lane.failed.append(ingest)
            log.warning("channel %s: a message could not be stored (%s); will try again",
                        stream, error)
            lane.answered()
            return
        except Exception:  # one bad event must not stop the channel
            log.exception("channel %s failed on %r", stream, ingest)
            index = None
        try:
            self._after_ingest(stream, ingest, index)
        except Exception:  # one bad event must not stop the channel
            log.exception("channel %s failed on %r", stream, ingest)
        finally:
            self._done(lane, ingest)
            lane.answered()

    async def _store_failed_again(self, stream: StreamId, lane: Lane) -> None:
        """Submit again, in order, the posts whose commit failed, waiting longer each time,
        until none fails; the lane's later jobs wait meanwhile. Other channels go on."""
        delay = self.supervisor.shared.live.retry_first_seconds
        while True:
            await lane.all_answered()
            if not lane.failed:
                return
            failed, lane.failed = lane.failed, []
            if self._closing:  # stopping: what the disk still refuses is fetched next start
                log.error("channel %s: %d messages could not be stored before stopping; the "
                          "next start reads them back from Discord", stream, len(failed))
                for ingest in failed:
                    self._done(lane, ingest)
                return
            await trio.sleep(delay)
            delay = next_retry_delay(delay, self.supervisor.shared.live.retry_most_seconds)
            lane.submitted(len(failed))
            requests = await self.supervisor.submit_all(stream, [one.post for one in failed])
            for ingest, request in zip(failed, requests, strict=True):
                request.when_answered(partial(self._answered, stream, lane, ingest))

    def _done(self, lane: Lane, job: Job) -> None:
        lane.done(job)
        if isinstance(job, Ingest) and job.claimed:
            self.unclaim(job.post)

    async def _do(self, stream: StreamId, job: Change | Backfill) -> None:
        match job:
            case Change(item=Edit() as edit, attachments_known=False):
                index = self.store.index_of(stream, edit.message_id)
                stored = None if index is None else self.store.message(stream, index)
                files = () if stored is None else stored.attachments
                edit = msgspec.structs.replace(edit, attachments=files)
                await self.supervisor.ask(stream, edit)
            case Change():
                await self.supervisor.ask(stream, job.item)
            case Backfill():
                job.stored = await self.history.fetch_missed(stream, job.forced)

    def _after_ingest(self, stream: StreamId, job: Ingest, index: int | None) -> None:
        """Once a message is stored: tell the watcher, and answer it if it waited for that."""
        if self.on_stored is not None:
            self.on_stored(stream, job.post, index)
        if index is not None and job.answer:
            self.answer_soon(stream, job.post)

    async def _describe(self, stream: StreamId) -> None:
        """Tell the actor the guild's and channel's names when they are new or changed."""
        cache = self.bot.cache
        guild = cache.get_guild(stream.guild_id)
        channel: hikari.GuildChannel | None = cache.get_guild_channel(stream.channel_id)
        if channel is None:
            channel = cache.get_thread(stream.channel_id)
        if guild is None or channel is None:
            return
        channel_name = channel.name or str(stream.channel_id)
        meta = self.store.meta(stream)
        if meta is not None and (meta.guild_name, meta.channel_name) == (guild.name, channel_name):
            return
        zone = meta.time_zone if meta is not None else self.supervisor.shared.settings.time_zone
        describe = Describe(guild_name=guild.name, channel_name=channel_name, time_zone=zone)
        await self.supervisor.ask(stream, describe)

    # -- backfill ---------------------------------------------------------------------

    async def backfill(self, channel_id: int) -> int:
        """Fetch a channel's history since its last stored message, in order; return how many
        messages were new. For the moderator's command (a trio function)."""
        cache = self.bot.cache
        channel: hikari.GuildChannel | None = cache.get_guild_channel(channel_id)
        if channel is None:
            channel = cache.get_thread(channel_id)
        if channel is None:
            fetched = await aio(lambda: self.bot.rest.fetch_channel(channel_id))
            if not isinstance(fetched, hikari.GuildChannel):
                raise ValueError(f"channel {channel_id} is not a guild channel")
            channel = fetched
        job = Backfill(forced=True)
        self._enqueue(stream_of(channel.guild_id, channel_id), job)
        await job.done.wait()
        return job.stored

    @property
    def replies_sent(self) -> int:
        return self.answerer.replies_sent

    # -- commands -------------------------------------------------------------------------

    async def _register_commands(self, guild_ids: list[int]) -> None:
        register = getattr(_commands(), "register_commands", None)
        if register is None or not self._application_id:
            return
        rest, application_id = self.bot.rest, self._application_id
        try:
            await aio(lambda: register(rest, application_id, guild_ids))
        except Exception:  # commands are an extra; the bot runs without them
            log.exception("registering the slash commands failed")
