# Calls across the two event loops of the bot's thread: trio's and hikari's asyncio.
#
# Shell. trio-asyncio runs an asyncio loop inside trio; these two helpers are the
# only places that cross from one to the other.
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import trio_asyncio  # type: ignore[import-untyped]

T = TypeVar("T")


async def aio(fn: Callable[[], Awaitable[T]]) -> T:
    """Await an asyncio coroutine (hikari's) from trio."""
    return cast(T, await trio_asyncio.aio_as_trio(fn)())


def run_trio(fn: Callable[[], Awaitable[T]]) -> Awaitable[T]:
    """Run a trio coroutine function from asyncio code (a hikari listener)."""
    return cast(Awaitable[T], trio_asyncio.trio_as_aio(fn)())
