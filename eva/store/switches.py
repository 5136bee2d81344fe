# The channel switches, read and written in the store's `switches` table.
#
# Shell. The bot reads them all at its start and keeps them in memory (`Switches`),
# changing them with the moderator's command; commands that write read them as they need.
from __future__ import annotations

from eva.core.channel_switch import (
    ChannelSwitch,
    SwitchBy,
    decode_switch,
    encode_switch,
    keeps,
    stream_of_switch_key,
    switch_key,
)
from eva.core.keys import SWITCHES, StreamId
from eva.core.settings import Listen
from eva.core.tables import Tables
from eva.store.event_store import EventStore


def read_switches(store: EventStore) -> dict[StreamId, ChannelSwitch]:
    with store.backend.reading() as tables:
        return {
            stream_of_switch_key(key): decode_switch(data)
            for key, data in tables.scan(SWITCHES, b"", b"\xff" * 17)
        }


def set_switch(store: EventStore, stream: StreamId, on: bool, by: SwitchBy, now_ms: int) -> None:
    def put(tables: Tables) -> None:
        tables.put(SWITCHES, switch_key(stream), encode_switch(
            ChannelSwitch(on=on, at_ms=now_ms, by=by)
        ))

    store.backend.write(put)


class Switches:
    """The switches as the bot holds them: read once, changed with the command."""

    def __init__(self, store: EventStore, listen: Listen) -> None:
        self.store = store
        self.listen = listen
        self.known = read_switches(store)

    def keeps(self, stream: StreamId) -> bool:
        return keeps(self.known.get(stream), self.listen)

    def turn(self, stream: StreamId, on: bool, by: SwitchBy, now_ms: int) -> None:
        set_switch(self.store, stream, on, by, now_ms)
        self.known[stream] = ChannelSwitch(on=on, at_ms=now_ms, by=by)
