# Compression runs: leaves for the older messages, and every merge that becomes ready.
#
# Shell: it reads the store, asks a summarizer, and appends line events
# through a writer. The rules come from the core (tree.leaf_work,
# tree.glue_or_task, timing.compression_cutoff). Ready merges come from the
# `ready` projection, the queue the log itself keeps: nothing scans the tree.
# Invariants: a line is written once per content (a task whose line exists is
# skipped); a summarizer reply that is empty, too long or for another address
# never lands; a task that keeps failing stays pending for the next run. What a
# run holds follows a chunk of messages or merges, not the channel: lines are
# appended as soon as they are made, in the order a run has always appended
# them (leaves, then each round's glue, then each round's model lines), and
# the lines it remembers are dropped after each chunk (`Run.forget_seen`); it
# keeps the addresses of the merges still to look at, and of the merges that
# wait for a model (their halves are read again when they are sent: only this
# run writes the stream's lines while it lasts), and the long messages' tasks.
# A run given a `block` (a build: one process, nobody waiting for its lines)
# goes through the messages an aligned block at a time instead: the block's
# leaves, then every merge they make ready, held in memory and appended together
# when the block is done, so a line is read back from the store only when it
# lies outside the block, and a block is one commit.
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TypeAlias

import trio

from eva.core.address import Address, address_at, halves, leaf, parent, sibling
from eva.core.events import AnyEvent, LineWritten
from eva.core.keys import StreamId
from eva.core.render import render_message
from eva.core.settings import MemorySettings
from eva.core.summarize import (
    LeafTask,
    MergeTask,
    Summarizer,
    Summary,
    Task,
    summarize_tasks,
    validate_line,
)
from eva.core.timing import compression_cutoff
from eva.core.tree import glue_or_task, leaf_work
from eva.store.event_store import Appended, EventStore, StoredMessage

log = logging.getLogger(__name__)

Append = Callable[[StreamId, Sequence[AnyEvent]], Awaitable[Appended]]
Pause = Callable[[], Awaitable[None]]
"""Awaited before each stretch of a run's work without a wait (eva.live.turns)."""
APPEND_CHUNK = 256
"""Lines appended together: the writer takes background work about this much at a time."""
STEP_CHUNK = 256
"""Messages or merges looked at between two checkpoints, so a run never holds the loop long."""
WORK_CHUNK = 1024
"""Messages read, or merges glued, at a time: their lines are appended, then forgotten."""
RELEASE_AFTER = 1024
"""Messages or merges worked through between two releases of the store's mapped pages
(a long run reads the whole channel; see LmdbBackend.release_pages)."""
HELD_APPEND_CHUNK = 1 << 15
"""Lines a run that holds its blocks' lines appends together (one commit for a block)."""
MAX_ATTEMPTS = 3

Waiting: TypeAlias = LeafTask | Address
"""Work for a model: a long message's task, or the address of a merge (`MergeTask` made
again from its halves when it is sent)."""


@dataclass(slots=True)
class CompressStats:
    """What one or more runs did, for status lines and benchmarks."""

    leaves_verbatim: int = 0
    leaves_model: int = 0
    merges_glue: int = 0
    merges_model: int = 0
    model_requests: int = 0
    model_input_bytes: int = 0
    model_output_bytes: int = 0
    rejected_replies: int = 0
    pending: int = 0  # tasks given up after repeated failures: retried by a later run
    deferred: int = 0  # merges waiting to fill a request: taken by a later run

    def add(self, other: CompressStats) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class Run:
    store: EventStore
    stream: StreamId
    append: Append
    settings: MemorySettings
    now_ms: int
    pause: Pause = trio.lowlevel.checkpoint
    stats: CompressStats = field(default_factory=CompressStats)
    attempts: dict[Address, int] = field(default_factory=dict)
    given_up: set[Address] = field(default_factory=set)
    written: dict[Address, LineWritten] = field(default_factory=dict)
    # What this run read of the store. Only this run writes the stream's lines
    # while it lasts (forget stops it first), so neither goes out of date;
    # a line it writes lands in `written`, which is asked first.
    read: dict[Address, LineWritten] = field(default_factory=dict)
    absent: set[Address] = field(default_factory=set)
    unleafed: Mapping[int, StoredMessage] | None = None
    worked: int = 0  # messages or merges worked through since the last release
    hold: bool = False
    """Keep every line made or read until the block is done, and append the lines
    made then (`send_held`), instead of a chunk at a time."""
    held: list[LineWritten] = field(default_factory=list)

    def line(self, address: Address) -> LineWritten | None:
        """A line by address: one this run wrote, else the store's."""
        found = self.written.get(address)
        if found is None:
            found = self.read.get(address)
        if found is None and address not in self.absent:
            self.prefetch([address])
            found = self.read.get(address)
        return found

    def forget_seen(self, worked: int) -> None:
        """Drop the lines this run remembers, once every line it made is appended, after
        `worked` more messages or merges: what it asks for again is read from the store.
        A run that holds its lines keeps them until its block is done."""
        if not self.hold:
            self._forget()
        self.worked += worked
        if self.worked >= RELEASE_AFTER:
            self.worked = 0
            self.store.backend.release_pages()

    def _forget(self) -> None:
        self.written.clear()
        self.read.clear()
        self.absent.clear()

    async def send_held(self) -> None:
        """Append the lines held for the block just done, and forget what it remembers."""
        held, self.held = self.held, []
        for start in range(0, len(held), HELD_APPEND_CHUNK):
            await self.append(self.stream, held[start : start + HELD_APPEND_CHUNK])
        self._forget()

    def _seen(self, address: Address) -> bool:
        return address in self.written or address in self.read or address in self.absent

    def prefetch_leaves(self, start: int, stop: int) -> None:
        """Read the leaves of messages start..stop-1 in one range read; the rest are absent."""
        found = self.store.lines_of_level(self.stream, 1, start, stop)
        for index in range(start, stop):
            address = leaf(index)
            if self._seen(address):
                continue
            line = found.get(address)
            if line is None:
                self.absent.add(address)
            else:
                self.read[address] = line

    def prefetch(self, addresses: Iterable[Address]) -> None:
        """Read the lines at `addresses` that this run has not seen yet, in one transaction."""
        written, read, absent = self.written, self.read, self.absent
        wanted = [
            address
            for address in dict.fromkeys(addresses)
            if address not in written and address not in read and address not in absent
        ]
        if not wanted:
            return
        found = self.store.lines(self.stream, wanted)
        for address in wanted:
            line = found.get(address)
            if line is None:
                self.absent.add(address)
            else:
                self.read[address] = line


def run_cutoff(store: EventStore, stream: StreamId, settings: MemorySettings) -> int:
    """The index up to which a compression run started now would write leaves."""
    meta = store.meta(stream)
    if meta is None:
        return 0
    newest = store.sizes_newest_first(stream, meta.leaf_frontier)
    return compression_cutoff(newest, meta.leaf_frontier, settings)


async def compress(
    store: EventStore,
    stream: StreamId,
    summarizer: Summarizer,
    append: Append,
    settings: MemorySettings,
    now_ms: int,
    upto: int,
    urgent: bool = True,
    unleafed: Mapping[int, StoredMessage] | None = None,
    pause: Pause = trio.lowlevel.checkpoint,
    block: int | None = None,
) -> CompressStats:
    """Write the leaves of messages before `upto` and every merge that becomes ready.

    Merges left ready by an earlier run (the `ready` projection) are picked up
    first; after that, each line written offers its parent, so ready work is
    found from what was just written, never by scanning. Unless `urgent`,
    merges that would only make a request less than full wait in the ready
    queue for the next run (publishing needs leaves, not merges), so requests
    carry a full `tasks_per_request` wherever they can. `unleafed` may hold the
    messages the leaves are made of, as the store holds them now (a live actor
    keeps those it stored); the store is read where it does not hold them all.
    `pause` is awaited before each stretch of work between two waits (at most
    STEP_CHUNK messages or merges), so that a process compressing many
    channels can let them take turns. With `block`, the messages are worked
    through in blocks that end at multiples of it, each block's lines held and
    appended together when it is done (see the module's comment).
    """
    run = Run(
        store, stream, append, settings, now_ms, pause, unleafed=unleafed, hold=block is not None
    )
    await pause()
    candidates = {Address(start, size) for start, size in store.ready(stream)}
    tasks: list[Waiting] = []
    queued: set[Address] = set()
    for start, stop in _spans(store, stream, upto, block):
        leaf_tasks, ready = await _leaves(run, start, stop)
        tasks.extend(leaf_tasks)
        candidates |= ready
        queued.update(task.address for task in leaf_tasks)
        tasks = await _rounds(run, summarizer, candidates, tasks, queued, urgent)
        candidates = set()
        await run.send_held()
    run.stats.pending = len(run.given_up)
    run.stats.deferred = len(tasks)
    return run.stats


def _spans(
    store: EventStore, stream: StreamId, upto: int, block: int | None
) -> list[tuple[int, int]]:
    """The messages whose leaves a run writes, start..stop-1: in one span, or in spans
    that end at multiples of `block` (always at least one span, maybe empty)."""
    meta = store.meta(stream)
    start = 0 if meta is None else meta.leaf_frontier
    stop = max(start, min(upto, 0 if meta is None else meta.messages))
    if block is None or stop - start <= block:
        return [(start, stop)]
    ends = [*range(start - start % block + block, stop, block), stop]
    return list(zip([start, *ends[:-1]], ends, strict=True))


async def _rounds(
    run: Run,
    summarizer: Summarizer,
    candidates: set[Address],
    tasks: list[Waiting],
    queued: set[Address],
    urgent: bool,
) -> list[Waiting]:
    """Glue the candidates and what they make ready, and send the work for a model a
    round at a time until none is left to send now; the work that waits."""
    while True:
        tasks.extend(await _glue(run, candidates, queued))
        waiting, tasks = _next_round(tasks, run.settings, urgent)
        if not waiting:
            return tasks
        sending = _tasks_of(run, waiting)
        retry, staged = await summarize_round(run, summarizer, sending, urgent)
        await run.pause()
        queued -= {line_address(line) for line in staged}
        tasks.extend(task if isinstance(task, LeafTask) else task.address for task in retry)
        candidates = _parents_ready(run, staged)
        await append_lines(run, staged)
        run.forget_seen(len(sending))


def _tasks_of(run: Run, waiting: list[Waiting]) -> list[Task]:
    """The tasks to send for work that waits: each merge's made from its halves."""
    merges = [work for work in waiting if isinstance(work, Address)]
    run.prefetch(chain.from_iterable(map(halves, merges)))
    tasks: list[Task] = []
    for work in waiting:
        if isinstance(work, LeafTask):
            tasks.append(work)
            continue
        left, right = halves_of(run, work)
        tasks.append(MergeTask(address=work, left_text=left.text, right_text=right.text))
    return tasks


def _next_round(
    tasks: list[Waiting], settings: MemorySettings, urgent: bool
) -> tuple[list[Waiting], list[Waiting]]:
    """The tasks to send now (leaves first), and those that wait."""
    per_request = settings.tasks_per_request
    round_size = per_request * settings.model_calls_in_flight
    ordered = sorted(tasks, key=lambda task: not isinstance(task, LeafTask))
    sending = ordered[:round_size]
    if not urgent and len(sending) % per_request:
        full = len(sending) - len(sending) % per_request
        leaves = sum(isinstance(task, LeafTask) for task in sending)
        keep = max(full, min(len(sending), -(-leaves // per_request) * per_request))
        sending = sending[:keep]
    return sending, ordered[len(sending) :]


def line_address(line: LineWritten) -> Address:
    return address_at(line.start, line.size)


def _parents_ready(run: Run, written: Sequence[LineWritten]) -> set[Address]:
    """The parents that the lines just written complete (their sibling exists).

    Each line's sibling is looked up where this run keeps lines; those it has
    not seen are read from the store together.
    """
    found: set[Address] = set()
    meta = run.store.meta(run.stream)
    total = 0 if meta is None else meta.messages
    known, read, absent = run.written, run.read, run.absent
    unseen: list[tuple[Address, Address]] = []  # (parent, sibling) for siblings not seen
    for line in written:
        address = address_at(line.start, line.size)
        above = parent(address)
        if above.start + above.size > total:
            continue
        other = sibling(address)
        if other in known or other in read:
            found.add(above)
        elif other not in absent:
            unseen.append((above, other))
    if unseen:
        run.prefetch([other for _, other in unseen])
        found.update(above for above, other in unseen if other in read)
    return found


def stage(run: Run, lines: list[LineWritten]) -> list[LineWritten]:
    """Remember lines about to be appended, so later steps of the run can read them."""
    for line in lines:
        run.written[line_address(line)] = line
    return lines


async def append_lines(run: Run, lines: list[LineWritten]) -> None:
    if run.hold:
        run.held.extend(lines)
        return
    for start in range(0, len(lines), APPEND_CHUNK):
        await run.append(run.stream, lines[start : start + APPEND_CHUNK])
    if lines:
        await run.pause()


async def _leaves(
    run: Run, first: int, stop: int
) -> tuple[list[LeafTask], set[Address]]:
    """Append the verbatim leaves of messages first..stop-1, a chunk of messages at a time;
    the leaves that need a model, and the merges the leaves appended make ready."""
    tasks: list[LeafTask] = []
    ready: set[Address] = set()
    for start in range(first, stop, WORK_CHUNK):
        end = min(start + WORK_CHUNK, stop)
        run.prefetch_leaves(start, end)
        lines: list[LineWritten] = []
        for count, (index, message) in enumerate(_messages(run, start, end), 1):
            if count % STEP_CHUNK == 0:
                await run.pause()
            if run.line(leaf(index)) is not None:
                continue
            work = leaf_of(run, index, message)
            if isinstance(work, LeafTask):
                tasks.append(work)
            else:
                lines.append(work)
        ready |= _parents_ready(run, stage(run, lines))
        await append_lines(run, lines)
        run.forget_seen(end - start)
    return tasks, ready


def _messages(run: Run, start: int, stop: int) -> Iterable[tuple[int, StoredMessage]]:
    """Messages start..stop-1 that are not erased, from `unleafed` if it has them all."""
    known = run.unleafed
    if known is not None and all(index in known for index in range(start, stop)):
        return [(index, known[index]) for index in range(start, stop)]
    return run.store.messages(run.stream, start, stop)


def leaf_for(run: Run, index: int) -> LineWritten | LeafTask:
    """The leaf of message `index`: verbatim if it fits (empty once erased), else a model task."""
    message = run.store.message(run.stream, index)
    assert message is not None
    return leaf_of(run, index, message)


def leaf_of(run: Run, index: int, message: StoredMessage) -> LineWritten | LeafTask:
    """The leaf of `message`, stored at `index`."""
    posted = message.posted
    authors: tuple[int, ...] = ()
    if message.deleted:
        text = ""
    else:
        rendered = render_message(posted.author_name, message.content, message.attachments)
        work = leaf_work(index, posted.author_name, rendered, run.settings.line_limit)
        if isinstance(work, LeafTask):
            return work
        text, authors = work, (posted.author_id,)
    run.stats.leaves_verbatim += 1
    return LineWritten(
        at_ms=run.now_ms,
        start=index,
        size=1,
        text=text,
        first_ms=posted.at_ms,
        last_ms=posted.at_ms,
        authors=authors,
        how="verbatim",
    )


async def _glue(run: Run, candidates: set[Address], queued: set[Address]) -> list[Address]:
    """Glue every candidate merge that fits, and the parents that gluing completes,
    appending the glued lines a chunk of merges at a time.

    Returns the merges that need a model (now in `queued`).
    """
    tasks: list[Address] = []
    while candidates:
        ordered = sorted(candidates, key=lambda a: (a.size, a.start))
        candidates = set()
        for first in range(0, len(ordered), WORK_CHUNK):
            chunk = ordered[first : first + WORK_CHUNK]
            level: list[LineWritten] = []
            run.prefetch(chain(chunk, *map(halves, chunk)))
            for count, address in enumerate(chunk, 1):
                if count % STEP_CHUNK == 0:
                    await run.pause()
                if address in queued or address in run.given_up or run.line(address) is not None:
                    continue
                left, right = halves_of(run, address)
                work = glue_or_task(address, left.text, right.text, run.settings.line_limit)
                if isinstance(work, MergeTask):
                    tasks.append(address)
                    queued.add(address)
                    continue
                level.append(merged_line(run, address, left, right, work, "glue"))
            run.stats.merges_glue += len(level)
            candidates |= _parents_ready(run, stage(run, level))
            await append_lines(run, level)
            run.forget_seen(len(chunk))
    return tasks


def halves_of(run: Run, address: Address) -> tuple[LineWritten, LineWritten]:
    left_half, right_half = halves(address)
    left = run.line(left_half)
    right = run.line(right_half)
    if left is None or right is None:
        raise LookupError(f"{run.stream}: merge {address} is missing a half")
    return left, right


def merged_line(
    run: Run,
    address: Address,
    left: LineWritten,
    right: LineWritten,
    text: str,
    how: str,
    summary: Summary | None = None,
) -> LineWritten:
    return LineWritten(
        at_ms=run.now_ms,
        start=address.start,
        size=address.size,
        text=text,
        first_ms=min(left.first_ms, right.first_ms),
        last_ms=max(left.last_ms, right.last_ms),
        authors=tuple(sorted(set(left.authors) | set(right.authors))),
        how="glue" if how == "glue" else "model",
        model=summary.model if summary is not None else "",
        usage=summary.usage if summary is not None else None,
        batch_usage=summary.batch_usage if summary is not None else None,
    )


async def summarize_round(
    run: Run, summarizer: Summarizer, tasks: list[Task], urgent: bool = True
) -> tuple[list[Task], list[LineWritten]]:
    """Ask for up to `model_calls_in_flight` batches at once (unless `urgent`, maybe slower).

    A batch holding a leaf is always urgent: the next publish needs the leaves,
    while merges can wait for the cheaper, slower Message Batches API.
    Returns the tasks to ask again and the lines made (staged, for the caller to append).
    """
    per_request = run.settings.tasks_per_request
    batches = [tasks[i : i + per_request] for i in range(0, len(tasks), per_request)]
    answers: list[list[Summary]] = [[] for _ in batches]

    async def ask(position: int, batch: list[Task]) -> None:
        run.stats.model_requests += 1
        run.stats.model_input_bytes += sum(_task_bytes(t) for t in batch)
        try:
            now = urgent or any(isinstance(task, LeafTask) for task in batch)
            answers[position] = await summarize_tasks(summarizer, batch, now)
        except Exception as error:  # a failing model must not lose the run's other work
            log.warning("summarizer failed on %d tasks: %s", len(batch), error)

    async with trio.open_nursery() as nursery:
        for position, batch in enumerate(batches):
            nursery.start_soon(ask, position, batch)
    retry: list[Task] = []
    lines: list[LineWritten] = []
    for batch, summaries in zip(batches, answers, strict=True):
        batch_retry, batch_lines = _land(run, batch, summaries)
        retry.extend(batch_retry)
        lines.extend(batch_lines)
    return retry, stage(run, lines)


def _land(
    run: Run, batch: list[Task], summaries: list[Summary]
) -> tuple[list[Task], list[LineWritten]]:
    """The lines of the valid replies, and the tasks whose reply may not land."""
    by_address: dict[Address, list[Summary]] = {}
    for summary in summaries:
        by_address.setdefault(Address(*summary.address), []).append(summary)
    lines: list[LineWritten] = []
    retry: list[Task] = []
    for task in batch:
        answers = by_address.get(task.address, [])
        text = None
        if len(answers) == 1:
            text = validate_line(answers[0].text, run.settings.line_limit)
        if text is None:
            run.stats.rejected_replies += 1
            attempts = run.attempts.get(task.address, 0) + 1
            run.attempts[task.address] = attempts
            if attempts < MAX_ATTEMPTS:
                retry.append(task)
            else:
                log.warning("giving up on line %s for this run", task.address)
                run.given_up.add(task.address)
            continue
        run.stats.model_output_bytes += len(text.encode())
        lines.append(_model_line(run, task, text, answers[0]))
    return retry, lines


def _model_line(run: Run, task: Task, text: str, summary: Summary) -> LineWritten:
    if isinstance(task, LeafTask):
        message = run.store.message(run.stream, task.address.start)
        assert message is not None
        posted = message.posted
        run.stats.leaves_model += 1
        return LineWritten(
            at_ms=run.now_ms,
            start=task.address.start,
            size=1,
            text=text,
            first_ms=posted.at_ms,
            last_ms=posted.at_ms,
            authors=(posted.author_id,),
            how="model",
            model=summary.model,
            usage=summary.usage,
            batch_usage=summary.batch_usage,
        )
    left, right = halves_of(run, task.address)
    run.stats.merges_model += 1
    return merged_line(run, task.address, left, right, text, "model", summary)


def _task_bytes(task: Task) -> int:
    if isinstance(task, LeafTask):
        return len(task.text.encode())
    return len(task.left_text.encode()) + len(task.right_text.encode())
