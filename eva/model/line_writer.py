# The model side of the memory: a Summarizer that asks Claude to write leaf and merge lines.
#
# Shell: it asks with the texts of eva.model.line_prompt, calls the Messages API
# (or the Message Batches API for work that is not urgent) through
# call_with_retries, and checks every answer. It knows nothing of rows or runs:
# tasks in, summaries out; the one thing it keeps is the batch book it is given
# (eva.model.batch_book), so a batch in flight survives a restart.
# Invariants: a summary is returned only for a task of the request, at most one
# per task, non-empty and within `limit` bytes of UTF-8; a task with no usable
# answer gets no summary (the compression run retries it later). The usage of
# every response is split over the tasks it served, so the summaries' usage sums
# to what the provider reported for them.
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import anthropic
import trio
from anthropic.types import Message, MessageParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages import batch_create_params

from eva.core.address import Address, format_address
from eva.core.events import Usage
from eva.core.render import LINE_LIMIT_BYTES, cut_to_bytes, utf8_size
from eva.core.settings import ModelSettings
from eva.core.summarize import Summary, Task, task_fingerprint
from eva.model.batch_book import BatchBook, BatchRef
from eva.model.client import (
    BACKOFF_FIRST_S,
    ModelCallFailed,
    ModelRequestRefused,
    SpendLimitReached,
    call_with_retries,
)
from eva.model.line_prompt import CACHED_SYSTEM, parse_lines, request_text, too_long_text

log = logging.getLogger(__name__)

def split_evenly(total: int, parts: int) -> list[int]:
    """`total` in `parts` integer shares that differ by at most one and sum to `total`."""
    share, extra = divmod(total, parts)
    return [share + (1 if index < extra else 0) for index in range(parts)]


def split_by_weight(total: int, weights: Sequence[int]) -> list[int]:
    """`total` in integer shares in proportion to `weights` (evenly if all are 0).

    The shares sum to `total` exactly: the largest remainders get the rest.
    """
    if sum(weights) <= 0:
        return split_evenly(total, len(weights))
    exact = [total * weight / sum(weights) for weight in weights]
    shares = [int(value) for value in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: shares[i] - exact[i])
    for index in by_remainder[: total - sum(shares)]:
        shares[index] += 1
    return shares


@dataclass(slots=True)
class _Ledger:
    """Token counts charged to each task during one `summarize` call."""

    counts: dict[Address, list[int]] = field(default_factory=dict)
    batch_counts: dict[Address, list[int]] = field(default_factory=dict)
    """The part of `counts` charged through the Message Batches API."""

    def charge(
        self,
        message: Message,
        tasks: Sequence[Task],
        lengths: Sequence[int],
        *,
        batched: bool = False,
        request: Sequence[tuple[Address, int]] | None = None,
    ) -> None:
        """Charge each task its share of `message`'s usage.

        `request` lists every task the message answered, in order, with its
        answer's length, when only some of them are charged here: a batch sent
        before a restart may serve its tasks one call at a time, and the shares
        come out the same however they are asked.
        """
        usage = message.usage
        even = [
            usage.input_tokens,
            usage.cache_creation_input_tokens or 0,
            usage.cache_read_input_tokens or 0,
        ]
        if request is None:
            request = [(task.address, length) for task, length in zip(tasks, lengths, strict=True)]
        inputs, writes, reads = (split_evenly(total, len(request)) for total in even)
        outputs = split_by_weight(usage.output_tokens, [length for _, length in request])
        position = {address: index for index, (address, _) in enumerate(request)}
        ledgers = [self.counts, self.batch_counts] if batched else [self.counts]
        for task in tasks:
            index = position[task.address]
            for ledger in ledgers:
                counts = ledger.setdefault(task.address, [0, 0, 0, 0])
                counts[0] += inputs[index]
                counts[1] += outputs[index]
                counts[2] += writes[index]
                counts[3] += reads[index]

    def usage(self, address: Address) -> Usage:
        return _usage(self.counts.get(address, [0, 0, 0, 0]))

    def batch_usage(self, address: Address) -> Usage | None:
        counts = self.batch_counts.get(address)
        return None if counts is None else _usage(counts)


def _usage(counts: list[int]) -> Usage:
    return Usage(
        input_tokens=counts[0],
        output_tokens=counts[1],
        cache_write_tokens=counts[2],
        cache_read_tokens=counts[3],
    )


@dataclass(slots=True)
class _Outcome:
    """What one request (with its shortening follow-ups) gave."""

    lines: dict[Address, str] = field(default_factory=dict)
    missing: list[Task] = field(default_factory=list)
    model: str = ""


def reply_text(message: Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


class BatchGone(RuntimeError):
    """A message batch that no longer holds a usable answer (expired, failed, unknown)."""


class ClaudeLineWriter:
    """A Summarizer that writes leaf and merge lines with the line model, many tasks a request.

    Given a `BatchBook`, every message batch is written down before it is
    waited for, and a task already sent in a batch (before a restart, or by
    a call that was cut short) is taken from that batch rather than sent again.
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        settings: ModelSettings,
        limit: int = LINE_LIMIT_BYTES,
        *,
        backoff_first_s: float = BACKOFF_FIRST_S,
        book: BatchBook | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.limit = limit
        self.backoff_first_s = backoff_first_s
        self.book = book
        # Work that is not urgent goes through the Message Batches API, which may take hours.
        self.background_batches = settings.use_batches
        self.batches_resumed = 0

    async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
        """One summary per task that got a usable line, in the order of `tasks`.

        Unless `urgent`, the first request goes through the Message Batches API
        when the settings allow it. Answers missing, doubled, empty or for
        another address are asked again alone; lines over the limit are sent
        back to be shortened, and cut at a word as the last resort.
        """
        if not tasks:
            return []
        ledger = _Ledger()
        booked: dict[Address, bytes] = {}
        lines, model, rest = await self._resume(tasks, ledger, booked, wait=not urgent)
        missing: list[Task] = []
        if rest:
            via_batch = not urgent and self.settings.use_batches
            outcome = await self._write(rest, ledger, via_batch, booked)
            lines.update(outcome.lines)
            model, missing = model or outcome.model, outcome.missing
        for task in missing:
            log.info("no usable line for %s in a reply; asking for it alone",
                     format_address(task.address))
            try:
                alone = await self._write([task], ledger, via_batch=False)
            except (ModelCallFailed, ModelRequestRefused) as error:
                log.warning("asking for %s alone failed (%s); it stays pending",
                            format_address(task.address), error)
                continue
            lines.update(alone.lines)
            model = model or alone.model
            if alone.missing:
                log.warning("no usable line for %s even alone; it stays pending",
                            format_address(task.address))
        if self.book is not None:
            await self.book.drop([booked[a] for a in lines if a in booked])
        return [
            Summary(
                address=task.address,
                text=lines[task.address],
                model=model or self.settings.line_model,
                usage=ledger.usage(task.address),
                batch_usage=ledger.batch_usage(task.address),
            )
            for task in tasks
            if task.address in lines
        ]

    # -- one request and its follow-ups ------------------------------------------

    def _request(self, tasks: Sequence[Task]) -> str:
        return request_text(tasks, self.limit, self.settings.line_target_share)

    async def _write(
        self,
        tasks: Sequence[Task],
        ledger: _Ledger,
        via_batch: bool,
        booked: dict[Address, bytes] | None = None,
    ) -> _Outcome:
        conversation: list[MessageParam] = [
            {"role": "user", "content": self._request(tasks)}
        ]
        if via_batch:
            message, batched = await self._ask_batch(conversation, tasks, booked)
        else:
            message, batched = await self._ask(conversation, tasks), False
        return await self._take(conversation, message, tasks, ledger, batched)

    async def _take(
        self,
        conversation: list[MessageParam],
        message: Message,
        tasks: Sequence[Task],
        ledger: _Ledger,
        batched: bool,
        *,
        whole_request: bool = True,
    ) -> _Outcome:
        """The lines `message` gives for `tasks`, checked, shortened or cut to fit.

        Unless `whole_request`, the message answered other tasks too (a batch
        sent before), and the tasks are charged only their share of it.
        """
        answers = parse_lines(reply_text(message))
        outcome = _Outcome(model=message.model)
        shortest: dict[Address, str] = {}
        usable: dict[Address, str] = {}
        for task in tasks:
            said = answers.get(task.address, [])
            if len(said) == 1 and said[0]:
                usable[task.address] = said[0]
            else:
                outcome.missing.append(task)
        lengths = [utf8_size(usable.get(t.address, "")) for t in tasks]
        request = None
        if not whole_request:  # every answer of the request, in its order
            request = [(address, utf8_size(said[0]) if len(said) == 1 else 0)
                       for address, said in answers.items()]
            request += [(t.address, 0) for t in tasks if t.address not in answers]
        ledger.charge(message, tasks, lengths, batched=batched, request=request)
        for address, text in usable.items():
            if utf8_size(text) <= self.limit:
                outcome.lines[address] = text
            else:
                shortest[address] = text
        outcome.lines.update(await self._shorten(conversation, message, tasks, shortest, ledger))
        for address, text in shortest.items():
            cut = cut_to_bytes(text, self.limit)
            log.warning("line %s still %d bytes after %d requests to shorten it; cut to %d",
                        format_address(address), utf8_size(text),
                        self.settings.too_long_retries, utf8_size(cut))
            outcome.lines[address] = cut
        return outcome

    async def _shorten(
        self,
        conversation: list[MessageParam],
        message: Message,
        tasks: Sequence[Task],
        shortest: dict[Address, str],
        ledger: _Ledger,
    ) -> dict[Address, str]:
        """The lines that fit after sending those over the limit back in the same conversation.

        `shortest` holds the lines over the limit; an address leaves it once
        its line fits, and otherwise keeps the shortest answer seen.
        """
        by_address = {task.address: task for task in tasks}
        landed: dict[Address, str] = {}
        latest = dict(shortest)  # what the model last said, which the feedback is about
        for _ in range(self.settings.too_long_retries):
            if not shortest:
                break
            feedback = "\n".join(
                too_long_text(address, utf8_size(latest[address]), self.limit)
                for address in shortest
            )
            conversation.append({"role": "assistant", "content": reply_text(message)})
            conversation.append({"role": "user", "content": feedback})
            asked = [by_address[address] for address in shortest]
            try:
                message = await self._ask(conversation, asked)
            except ModelCallFailed as error:
                log.warning("asking to shorten %d lines failed (%s)", len(asked), error)
                break
            answers = parse_lines(reply_text(message))
            again = {
                task.address: said[0]
                for task in asked
                if len(said := answers.get(task.address, [])) == 1 and said[0]
            }
            ledger.charge(message, asked, [utf8_size(again.get(t.address, "")) for t in asked])
            latest.update(again)
            for address, text in again.items():
                if utf8_size(text) <= self.limit:
                    del shortest[address]
                    landed[address] = text
                elif utf8_size(text) < utf8_size(shortest[address]):
                    shortest[address] = text
        return landed

    # -- transport -----------------------------------------------------------

    def _params(
        self, conversation: list[MessageParam], tasks: Sequence[Task]
    ) -> MessageCreateParamsNonStreaming:
        return {
            "model": self.settings.line_model,
            "max_tokens": self._max_tokens(tasks),
            "system": CACHED_SYSTEM,
            "messages": list(conversation),
        }

    def _max_tokens(self, tasks: Sequence[Task]) -> int:
        """Room for every line even in a script of 2 bytes a token, and a line too long."""
        return max(256, len(tasks) * (self.limit // 2 + 64))

    def _what(self, tasks: Sequence[Task]) -> str:
        return f"{len(tasks)} line task{'s' if len(tasks) != 1 else ''}"

    async def _ask(self, conversation: list[MessageParam], tasks: Sequence[Task]) -> Message:
        messages = list(conversation)

        async def create() -> Message:
            return await self.client.messages.create(
                model=self.settings.line_model,
                max_tokens=self._max_tokens(tasks),
                system=CACHED_SYSTEM,
                messages=messages,
            )

        return await call_with_retries(
            create, self.settings, self._what(tasks), backoff_first_s=self.backoff_first_s
        )

    async def _ask_batch(
        self,
        conversation: list[MessageParam],
        tasks: Sequence[Task],
        booked: dict[Address, bytes] | None = None,
    ) -> tuple[Message, bool]:
        """The answer through the Message Batches API (and True); if the batch fails,
        through a direct request (and False)."""
        try:
            return await self._batch_answer(conversation, tasks, booked), True
        except SpendLimitReached:
            raise
        except Exception as error:  # any other batch trouble: the direct path still works
            log.warning("message batch for %s failed (%s); asking directly",
                        self._what(tasks), error)
            return await self._ask(conversation, tasks), False

    async def _batch_answer(
        self,
        conversation: list[MessageParam],
        tasks: Sequence[Task],
        booked: dict[Address, bytes] | None = None,
    ) -> Message:
        first = tasks[0].address
        custom_id = f"lines-{first.start}-{first.size}"
        request: batch_create_params.Request = {
            "custom_id": custom_id,
            "params": self._params(conversation, tasks),
        }
        what = f"a message batch of {self._what(tasks)}"

        async def create() -> anthropic.types.messages.MessageBatch:
            return await self.client.messages.batches.create(requests=[request])

        batch = await call_with_retries(
            create, self.settings, what, backoff_first_s=self.backoff_first_s
        )
        if self.book is not None:
            fingerprints = {task.address: self._fingerprint(task) for task in tasks}
            ref = BatchRef(batch.id, custom_id, self.book.now_ms())
            with trio.CancelScope(shield=True):  # a stop now must not lose a batch paid for
                await self.book.record(list(fingerprints.values()), ref)
            if booked is not None:
                booked.update(fingerprints)
        message = await self._batch_message(batch, custom_id, what, wait=True)
        assert message is not None, "waited until the batch ended"
        return message

    async def _batch_message(
        self,
        batch: anthropic.types.messages.MessageBatch,
        custom_id: str,
        what: str,
        *,
        wait: bool,
    ) -> Message | None:
        """The answer to request `custom_id` of `batch`, polled until it ends (if `wait`;
        else None while it is still running). Raises BatchGone when it has no answer."""
        batches = self.client.messages.batches

        async def retrieve() -> anthropic.types.messages.MessageBatch:
            return await batches.retrieve(batch.id)

        while batch.processing_status != "ended":
            if not wait:
                return None
            await trio.sleep(self.settings.batch_poll_seconds)
            batch = await call_with_retries(
                retrieve, self.settings, what, backoff_first_s=self.backoff_first_s
            )
        outcomes = {}  # read to the end, so the stream is closed before we go on
        async for item in await batches.results(batch.id):
            outcomes[item.custom_id] = item.result
        result = outcomes.get(custom_id)
        if result is None:
            raise BatchGone(f"batch {batch.id} has no result for {custom_id}")
        if result.type != "succeeded":
            raise BatchGone(f"batch {batch.id} request {custom_id}: {result.type}")
        return result.message

    # -- batches sent before -------------------------------------------------

    def _fingerprint(self, task: Task) -> bytes:
        return task_fingerprint(task, self.settings.line_model, self.limit)

    async def _resume(
        self, tasks: Sequence[Task], ledger: _Ledger, booked: dict[Address, bytes], *, wait: bool
    ) -> tuple[dict[Address, str], str, list[Task]]:
        """Lines for the tasks already sent in a message batch, the model that wrote
        them, and the tasks still to ask.

        A batch still running is waited for if `wait` (work that is not urgent),
        else its tasks are asked now. A batch whose answer is gone is struck
        from the book and its tasks asked again.
        """
        lines: dict[Address, str] = {}
        if self.book is None:
            return lines, "", list(tasks)
        fingerprints = {task.address: self._fingerprint(task) for task in tasks}
        found = self.book.find(fingerprints.values())
        groups: dict[BatchRef, list[Task]] = {}
        for task in tasks:
            ref = found.get(fingerprints[task.address])
            if ref is not None:
                groups.setdefault(ref, []).append(task)
                booked[task.address] = fingerprints[task.address]
        model = ""
        for ref, group in groups.items():
            what = f"message batch {ref.batch_id} sent before ({self._what(group)})"
            try:
                message = await self._sent_before(ref, what, wait=wait)
            except BatchGone as error:
                log.warning("%s has no answer (%s); asking again", what, error)
                await self.book.drop([fingerprints[task.address] for task in group])
                continue
            except (ModelCallFailed, ModelRequestRefused) as error:
                log.warning("%s could not be read (%s); asking again", what, error)
                continue
            if message is None:
                log.info("%s is still running; asking now", what)
                continue
            log.info("taking %s", what)
            self.batches_resumed += 1
            conversation: list[MessageParam] = [
                {"role": "user", "content": self._request(group)}
            ]
            outcome = await self._take(
                conversation, message, group, ledger, batched=True, whole_request=False
            )
            lines.update(outcome.lines)
            model = model or outcome.model
        return lines, model, [task for task in tasks if task.address not in lines]

    async def _sent_before(self, ref: BatchRef, what: str, *, wait: bool) -> Message | None:
        async def retrieve() -> anthropic.types.messages.MessageBatch:
            return await self.client.messages.batches.retrieve(ref.batch_id)

        try:
            batch = await call_with_retries(
                retrieve, self.settings, what, backoff_first_s=self.backoff_first_s
            )
        except ModelRequestRefused as error:
            if isinstance(error.__cause__, anthropic.NotFoundError):
                raise BatchGone(f"batch {ref.batch_id} is unknown") from error
            raise
        return await self._batch_message(batch, ref.custom_id, what, wait=wait)
