# The bot's health endpoint: `/livez` and `/readyz` over plain HTTP on one port, for an
# orchestrator's probes (the Kubernetes manifests in deploy/kubernetes/ point at it).
#
# Shell over eva.core.health, which decides and writes the bytes; this reads a request's
# head on trio's own sockets and gathers what readiness needs from the running bot: hikari's
# shards (`GatewayShard.is_connected`: true once Discord sent READY or RESUMED, false while
# the shard reconnects), the writer and the store. It may not block: each connection gets
# READ_TIMEOUT_S to send its head, and the answer is computed from values in memory and one
# empty read transaction.
# Invariants: it runs on the same trio loop as the bot, so an answer at all means the loop
# turns; every connection is closed after one answer; nothing it is sent reaches the bot.
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from eva.core.health import ALIVE, Health, answer, head_complete, readiness

if TYPE_CHECKING:
    from eva.discord.bot import EvaBot

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 2.0
"""How long a connection may take to send its request's head."""


def bot_readiness(eva: EvaBot) -> Health:
    """Whether the bot's shards are connected, its store open and it is not stopping."""
    connected = {int(shard_id): shard.is_connected for shard_id, shard in eva.bot.shards.items()}
    return readiness(
        expected=eva.shard_ids,
        connected=connected,
        store_open=_store_open(eva),
        stopping=eva.stopping,
    )


def _store_open(eva: EvaBot) -> bool:
    if not eva.supervisor.shared.writer.accepting:
        return False
    try:
        with eva.store.backend.reading():
            return True
    except Exception:  # a closed or broken environment: not ready, whatever the cause
        return False


def _checked(ready: Callable[[], Health]) -> Health:
    try:
        return ready()
    except Exception as error:  # a fault in the check must not stop the bot: not ready
        log.exception("the readiness check failed")
        return Health(False, (f"readiness check failed: {error!r}",))


async def serve_health(
    ready: Callable[[], Health],
    port: int,
    host: str | None = None,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer `/livez` and `/readyz` on `port` (0: any free one) until cancelled; reports
    the port it listens on through `task_status`. `host` None listens on every address."""

    async def serve(stream: trio.SocketStream) -> None:
        try:
            async with stream:
                head = b""
                with trio.move_on_after(READ_TIMEOUT_S):
                    while not head_complete(head):
                        data = await stream.receive_some(4096)
                        if not data:
                            break
                        head += data
                if head:
                    await stream.send_all(answer(head, ALIVE, _checked(ready)))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the prober went away: nothing to answer

    listeners = await trio.open_tcp_listeners(port, host=host)
    async with trio.open_nursery() as nursery:
        bound = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, serve, listeners)
        log.info("answering health checks on port %d (/livez, /readyz)", bound)
        task_status.started(bound)
