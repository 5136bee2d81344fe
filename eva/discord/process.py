# One bot process: the store, the supervisor, the reply sender and the gateway, run
# until a signal or a fatal gateway error, then closed in order.
#
# Shell. It opens what the process owns and hands hikari's GatewayBot (under
# trio-asyncio; never `bot.run()`) to an EvaBot. On a stop the gateway closes first,
# the lanes drain, then the supervisor's writer finishes its commits.
# With a health port it answers `/livez` and `/readyz` (eva.discord.health) from before
# the gateway connects until it stops.
# Invariants: a process writes only its own data directory; the exit status is 0
# after a clean stop and 1 when the gateway could not start or the health port could
# not be had.
from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import hikari
import msgspec
import trio

from eva.core.settings import LiveSettings, MemorySettings, ModelSettings
from eva.core.summarize import OfflineSummarizer, Summarizer
from eva.discord.bot import EvaBot
from eva.discord.bot_context import bot_id_of
from eva.discord.bridge import aio, open_asyncio_loop
from eva.discord.health import bot_readiness, serve_health
from eva.discord.history import Stored
from eva.discord.reply_sender import open_reply_sender
from eva.live.collector import freeze_start_up, serving_collector
from eva.live.supervisor import open_supervisor
from eva.model.batch_book import BatchBook
from eva.model.client import make_client
from eva.model.line_writer import ClaudeLineWriter
from eva.store.event_store import EventStore
from eva.store.key_binding import bind, bound_id
from eva.store.key_store import open_key_store
from eva.store.lmdb_kv import open_backend

log = logging.getLogger(__name__)

INTENTS = hikari.Intents.GUILDS | hikari.Intents.GUILD_MESSAGES | hikari.Intents.MESSAGE_CONTENT
CACHED = (
    hikari.api.CacheComponents.GUILDS
    | hikari.api.CacheComponents.GUILD_CHANNELS
    | hikari.api.CacheComponents.GUILD_THREADS
    | hikari.api.CacheComponents.ME
)
EXIT_OK, EXIT_FAILED = 0, 1


INTENT_HELP = (
    "Eva needs the privileged Message Content intent: switch it on in the Discord developer "
    "portal, on the application's Bot page, under Privileged Gateway Intents"
)


def token_problem(token: str) -> str | None:
    """What is wrong with the form of a bot token, or None when it looks like one."""
    try:
        hikari.applications.get_token_id(token)
    except ValueError:
        return (
            "DISCORD_TOKEN does not look like a bot token (three parts joined by dots, the "
            "first the bot's id in base64): copy it again from the Bot page of the "
            "application in the Discord developer portal"
        )
    return None


def connect_error(error: BaseException) -> str:
    """Why Discord could not be reached or refused Eva, in words an operator can act on."""
    if isinstance(error, hikari.UnauthorizedError):
        return f"Discord refused DISCORD_TOKEN ({error}); reset it on the Bot page and set it again"
    if isinstance(error, hikari.GatewayServerClosedConnectionError):
        if error.code == 4014:
            return f"Discord closed the gateway with 4014, disallowed intents: {INTENT_HELP}"
        if error.code == 4004:
            return "Discord closed the gateway with 4004, authentication failed: check the token"
    return str(error)


def make_gateway(token: str, rest_url: str | None = None) -> hikari.GatewayBot:
    """hikari's GatewayBot with the intents and cache Eva needs (logging left to the caller)."""
    return hikari.GatewayBot(
        token=token,
        rest_url=rest_url,
        intents=INTENTS,
        cache_settings=hikari.impl.CacheSettings(components=CACHED),
        logs=None,
        banner=None,
        suppress_optimization_warning=True,
        loads=msgspec.json.decode,  # the payloads' JSON, about four times faster than json's
    )


async def _watch_signals(eva: EvaBot) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s received: closing the gateway", signal.Signals(signum).name)
            eva.stop()
            return


async def _watch_gateway(eva: EvaBot) -> None:
    """Stop when hikari closes by itself (a fatal gateway error)."""
    try:
        await aio(eva.bot.join)
    except Exception:
        log.exception("the gateway stopped")
    eva.stop()


async def _serve_health(eva: EvaBot, nursery: trio.Nursery, port: int, host: str | None) -> bool:
    """Start answering health checks; False (said in the log) when the port cannot be had."""
    try:
        eva.health_port = await nursery.start(serve_health, partial(bot_readiness, eva), port, host)
    except OSError as error:
        log.error("could not answer health checks on port %d: %s", port, error)
        return False
    return True


async def _connect(
    eva: EvaBot,
    nursery: trio.Nursery,
    health: tuple[int | None, str | None],
    shards: tuple[Sequence[int] | None, int | None],
    started: float,
    task_status: trio.TaskStatus[EvaBot],
) -> int:
    """Answer the health probes (if a port is given), connect the gateway and report the
    bot started; the exit status so far (a failure stops the bot)."""
    port, host = health
    if port is not None and not await _serve_health(eva, nursery, port, host):
        eva.stop()
        return EXIT_FAILED
    try:
        await eva.start(*shards)
    except (hikari.HikariError, OSError) as error:
        log.error("could not connect to Discord: %s", connect_error(error))
        eva.stop()
        return EXIT_FAILED
    nursery.start_soon(_watch_gateway, eva)
    log.info("connected in %.1f s", time.monotonic() - started)
    freeze_start_up()
    task_status.started(eva)
    return EXIT_OK


async def run_bot(
    token: str,
    data_dir: Path,
    *,
    memory: MemorySettings | None = None,
    models: ModelSettings | None = None,
    live: LiveSettings | None = None,
    shard_ids: Sequence[int] | None = None,
    shard_count: int | None = None,
    rest_url: str | None = None,
    anthropic_key: str | None = None,
    anthropic_base_url: str | None = None,
    health_port: int | None = None,
    health_host: str | None = None,
    handle_signals: bool = True,
    on_stored: Stored | None = None,
    summarizer: Summarizer | None = None,
    task_status: trio.TaskStatus[EvaBot] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Run Eva in Discord until stopped (a signal, `EvaBot.stop()`, or cancellation).

    Opens the data directory's store and the supervisor, connects the gateway for
    `shard_ids` of `shard_count`, and reports the running `EvaBot` through `task_status`.
    Lines are written by Claude when `anthropic_key` is given, else offline (`summarizer`
    overrides both; benchmarks use it to time replies without line calls). With
    `health_port`, `/livez` and `/readyz` are answered there (0: any free port, then
    `EvaBot.health_port`) from before the gateway connects until the bot stops.
    Returns the exit status: 0 after a clean stop, 1 when the gateway could not start.
    """
    memory = memory or MemorySettings()
    models = models or ModelSettings()
    if anthropic_base_url is not None:
        models = msgspec.structs.replace(models, base_url=anthropic_base_url)
    store = EventStore(open_backend(data_dir))
    # bound by `eva run` before (a directory bound to a key store is opened with it only)
    bind(store, open_key_store(create=bound_id(store) is None), write=True)
    client = make_client(models, anthropic_key) if anthropic_key else None
    if summarizer is None:
        summarizer = (
            OfflineSummarizer(memory.line_limit)
            if client is None
            else ClaudeLineWriter(client, models, memory.line_limit,
                                  book=BatchBook(store.backend))
        )
    started = time.monotonic()
    status = EXIT_OK
    try:
        with serving_collector():
            async with (
                open_supervisor(store, summarizer, memory, live, data_dir=data_dir) as supervisor,
                open_reply_sender(token, rest_url) as replies,
                open_asyncio_loop(),
                trio.open_nursery() as nursery,
            ):
                gateway = make_gateway(token, rest_url)
                eva = EvaBot(gateway, bot_id_of(token), supervisor, client, models, data_dir,
                             nursery, on_stored, replies)
                if handle_signals:
                    nursery.start_soon(_watch_signals, eva)
                status = await _connect(
                    eva, nursery, (health_port, health_host), (shard_ids, shard_count),
                    started, task_status,
                )
                try:
                    await eva.wait_stopped()
                finally:
                    await eva.close()
                    nursery.cancel_scope.cancel()
    finally:
        if client is not None:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await client.close()
    return status
