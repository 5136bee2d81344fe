# What the running bot hands its slash commands, and what it reads off its token.
#
# Shell: plain values and a protocol; eva.discord.bot makes the context, and
# eva.discord.commands reads it (through its own protocol, CommandContext).
from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import hikari

from eva.core.opt_out import OptedOut
from eva.core.settings import MemorySettings, ModelSettings
from eva.live.supervisor import Supervisor
from eva.store.event_store import EventStore
from eva.store.switches import Switches

T = TypeVar("T")


class RunTrio(Protocol):
    """Runs a trio coroutine function from asyncio code and returns its result."""

    def __call__(self, fn: Callable[[], Awaitable[T]], /) -> Awaitable[T]: ...


@dataclass(slots=True)
class BotContext:
    """What slash commands get: the process's memory and a way into trio.

    Commands run in asyncio (hikari's listener); every call into the supervisor or the
    store's writers goes through `run_trio`, e.g.
    `await context.run_trio(lambda: context.supervisor.forget(user_id, guild_id=g))`.
    `backfill(channel_id)` is a trio function (call it through `run_trio` too): it fetches
    the channel's history since its last stored message and returns how many were new.
    """

    supervisor: Supervisor
    store: EventStore
    eva_id: int
    run_trio: RunTrio
    model_settings: ModelSettings
    memory_settings: MemorySettings
    backfill: Callable[[int], Awaitable[int]]
    rest: hikari.api.RESTClient
    data_dir: Path
    switches: Switches
    opted_out: OptedOut


def bot_id_of(token: str) -> int:
    """The bot's user id, which a Discord bot token carries in its first segment."""
    head = token.split(".", 1)[0]
    try:
        return int(base64.b64decode(head + "=" * (-len(head) % 4)))
    except ValueError:
        return 0
