# The program the crash test kills: appends batches to an LMDB store until killed.
#
# Run as `python tests/crash_child.py DATA_DIR [SEED]`. It continues every
# stream from the messages already stored, appends random-size batches of
# MessagePosted across two or three streams in one `append_many` (one commit),
# and only after that commit returns prints one acknowledgement line and
# flushes it: `ack GUILD/CHANNEL=LAST_SEQ ...`. Whatever it has acknowledged
# must be found after a SIGKILL at any moment. The event at a given stream
# and index is always the same (`expected_event`), so the parent can check
# every byte that came back.
from __future__ import annotations

import random
import sys
from pathlib import Path

from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.store.event_store import Appended, Batch, EventStore
from eva.store.key_binding import bind
from eva.store.key_store import open_key_store
from eva.store.lmdb_kv import open_backend

STREAMS = (StreamId(7, 1), StreamId(7, 2), StreamId(8, 1))
MAP_BYTES = 256 * 1024  # tiny, so the map grows (and is killed while growing) early on
MAX_BATCH = 12


def expected_event(stream: StreamId, index: int) -> MessagePosted:
    """The message the child writes at `index` of `stream`, every time."""
    return MessagePosted(
        at_ms=1_600_000_000_000 + index * 1000,
        index=index,
        message_id=stream.channel_id * 10**9 + index,
        author_id=index % 5,
        author_name=f"person {index % 5}",
        content=f"{stream} says {index} " + "x" * (index * 37 % 300),
    )


def main(argv: list[str]) -> int:
    data_dir = Path(argv[1])
    rng = random.Random(int(argv[2]) if len(argv) > 2 else 0)
    store = EventStore(open_backend(data_dir, map_bytes=MAP_BYTES))
    bind(store, open_key_store(create=True), write=True, say=None)  # as a command binds it
    counts = {}
    for stream in STREAMS:
        meta = store.meta(stream)
        counts[stream] = 0 if meta is None else meta.messages
    while True:
        chosen = rng.sample(STREAMS, rng.randint(2, len(STREAMS)))
        batches = []
        for stream in chosen:
            first = counts[stream]
            size = rng.randint(1, MAX_BATCH)
            batches.append(Batch(stream, [expected_event(stream, first + i) for i in range(size)]))
        results = store.append_many(batches)
        acks = []
        for result in results:
            if not isinstance(result, Appended):
                print(f"refused: {result}", file=sys.stderr, flush=True)
                return 2
            counts[result.stream] = result.first + result.count
            acks.append(f"{result.stream}={result.first + result.count - 1}")
        sys.stdout.write("ack " + " ".join(acks) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
