# A second process that commits the live writer's groups, on a core of its own.
#
# Applying events to the projections is Python work, and it is most of what
# a commit costs; in a thread of the serving process it shares one
# interpreter lock with the trio loop, and LMDB hands that lock over at every
# read and write, so the two threads take turns at every store operation.
# In a child interpreter (eva.store.write_child) the commit runs beside the
# loop instead. The child opens the same data directory (LMDB serializes
# writers across processes, and readers here see each commit once it is
# made) and does exactly what `EventStore.append_many` does here.
#
# This is the serving side, over eva.store.pipe_child. A whole group is
# encoded here in one call, so an event that cannot be stored is refused here
# with the error the store gives. The trio writer talks to the child through
# pipes that never block (`send`, `answer`), with no thread between: a hop to
# a worker thread and back costs more than a small commit. The child
# dies with the thread that started it, so a killed bot leaves no writer
# behind, and a commit cut short that way is undone by LMDB (its senders were
# never answered). If the child dies, the groups sent to it fail (they may or
# may not have landed) and the next group starts a new child.
from __future__ import annotations

from pathlib import Path

from eva.core.projection import Rejected
from eva.store.event_store import Appended, Batch, stored_events
from eva.store.pipe_child import ChildGone, Pending, PipeChild
from eva.store.write_protocol import Committed, Failed, OutBatch, answer_decoder, encoder


class WriteProcessError(RuntimeError):
    """A group could not be committed by the write process."""


class Submitted:
    """A group handed to the child, waiting for its answer (see `WriteProcess.answer`)."""

    __slots__ = ("answer", "batches", "pending", "results", "sent")

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.results: list[Appended | Rejected | None] = [None] * len(batches)
        self.sent: list[int] = []  # the positions of the batches sent
        self.pending: Pending | None = None  # None: nothing was sent
        self.answer: Committed | Failed | None = None


class WriteProcess:
    """The serving side: `append_many` as the store has it, committed by the child.

    `start` (on the thread of the trio loop) before each group. Groups go with
    `send` while earlier ones are committed, and the child commits them in that
    order; `answer` takes each one's results.
    """

    def __init__(self, data: Path) -> None:
        self.data = data
        self.child = PipeChild("eva.store.write_child", [str(data)])

    @property
    def started(self) -> int:
        """How many children were started."""
        return self.child.started

    def start(self) -> None:
        """Start the child unless it is running (after `suspend`, or if it died)."""
        self.child.start()

    def suspend(self) -> None:
        """Let the child leave once every group handed to it is answered: the data file
        may be swapped now; the next group starts a new child on the new file."""
        self.child.suspend()

    def close(self) -> None:
        """Stop the child; a group still waiting for its answer fails."""
        self.child.close()

    async def append_many(self, batches: list[Batch]) -> list[Appended | Rejected]:
        """Commit `batches` in one write transaction; see `EventStore.append_many`."""
        return await self.answer(await self.send(batches))

    async def send(self, batches: list[Batch]) -> Submitted:
        """Hand a group to the child; its events that cannot be stored are refused here."""
        submitted, request = self._encoded(batches)
        if request is not None:
            try:
                submitted.pending = await self.child.send(request)
            except ChildGone as gone:
                raise WriteProcessError(str(gone)) from None
        return submitted

    async def answer(self, submitted: Submitted) -> list[Appended | Rejected]:
        """The results of a group sent, once the child has committed it."""
        if submitted.answer is None and submitted.pending is not None:
            try:
                submitted.answer = answer_decoder.decode(await self.child.answer(submitted.pending))
            except ChildGone as gone:
                submitted.answer = Failed(str(gone))
        return self._results(submitted)

    def _encoded(self, batches: list[Batch]) -> tuple[Submitted, bytes | None]:
        """The group and the body to send it in; none if no batch can be stored."""
        submitted = Submitted(batches)
        out = [OutBatch(b.stream.guild_id, b.stream.channel_id, b.events) for b in batches]
        try:
            body = encoder.encode(out)  # the whole group in one call
            submitted.sent = list(range(len(batches)))
        except (OverflowError, TypeError, ValueError):  # find the batches that cannot be
            for position, batch in enumerate(batches):  # stored, as the store words it
                try:
                    stored_events(batch)
                except Rejected as refused:
                    submitted.results[position] = refused
                    continue
                submitted.sent.append(position)
            body = encoder.encode([out[position] for position in submitted.sent])
        if not submitted.sent:
            submitted.answer = Committed([])
            return submitted, None
        return submitted, body

    @staticmethod
    def _results(submitted: Submitted) -> list[Appended | Rejected]:
        answer = submitted.answer
        if isinstance(answer, Failed):
            raise WriteProcessError(answer.error)
        assert answer is not None
        if len(answer.results) != len(submitted.sent):
            raise WriteProcessError("the write process answered for other batches")
        results = submitted.results
        for position, result in zip(submitted.sent, answer.results, strict=True):
            stream = submitted.batches[position].stream
            results[position] = (
                Rejected(result.refused)
                if result.refused is not None
                else Appended(stream, result.first, result.count, result.meta)
            )
        return [result for result in results if result is not None]
