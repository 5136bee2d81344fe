# What a channel does with each input: post, edit, delete, describe, read, forget, record.
#
# Shell (trio; a part of ChannelActor, see eva.live.channel_state). Each input becomes the
# events it means, appended through the writer, or a read of the channel's memory.
# Invariants: an input that fails is logged with the input and answered with the error, and
# the actor carries on (a bad zoom address is an answer, not a crash); an edit or a deletion
# drops what the actor keeps of unleafed messages before it lands, and has the old words
# purged later; a forget stops compression first, so no old text lands after it.
from __future__ import annotations

import logging
from datetime import date
from typing import Any, assert_never

from eva.core.events import AnyEvent, ChannelDescribed, MessageDeleted, MessageEdited, ToolCalled
from eva.live.inputs import (
    ChannelInput,
    DateOf,
    Delete,
    Describe,
    Edit,
    ForgetHere,
    GetPrompt,
    Post,
    Recall,
    RecordReply,
    RecordTool,
    Zoom,
)
from eva.live.reads import Reads
from eva.live.request import CompressionDone, Request
from eva.memory.forget import StreamErased, erase_in_stream
from eva.memory.view import ZoomError, recall, zoom

log = logging.getLogger("eva.live.actor")  # the channel actor's log, whichever part of it speaks


class ChannelInputs(Reads):
    """The part of a channel's actor that serves each input."""

    async def _serve(self, request: Request) -> None:
        item = request.item
        try:
            if isinstance(item, CompressionDone):
                await self._compression_done(item)
                request.reply()
                return
            request.reply(await self._handle(item))
        except ZoomError as error:  # a bad address from a person or a model: an answer, not a crash
            request.reply(error=error)
        except Exception as error:  # an input that fails must not stop the channel
            self.shared.crashes += 1
            log.exception("channel %s failed on input %r", self.stream, item)
            request.reply(error=error)

    async def _handle(self, item: ChannelInput) -> Any:
        match item:
            case Post():
                indexes, meta = await self._posts([item])
                if meta is not None:
                    await self._after_posts(meta)
                return indexes[0]
            case Edit():
                return await self._edit(item)
            case Delete():
                return await self._delete(item)
            case Describe():
                await self._write(
                    [
                        ChannelDescribed(
                            at_ms=self.shared.wall_ms(),
                            guild_id=self.stream.guild_id,
                            channel_id=self.stream.channel_id,
                            guild_name=item.guild_name,
                            channel_name=item.channel_name,
                            time_zone=item.time_zone,
                        )
                    ]
                )
                return None
            case GetPrompt():
                return self.prompt(item.ahead, item.budget)
            case Zoom():
                return zoom(
                    self.shared.store, self.stream, item.address, self.shared.settings, item.page
                )
            case Recall():
                return recall(
                    self.shared.store,
                    self.stream,
                    item.query,
                    self.shared.settings,
                    person=item.person,
                    after=None if item.after is None else date.fromisoformat(item.after),
                    before=None if item.before is None else date.fromisoformat(item.before),
                )
            case ForgetHere():
                return await self._forget(item)
            case DateOf():
                message = self.shared.store.message(self.stream, item.index)
                if message is None:
                    return None
                return message.posted.at_ms
            case RecordTool():
                tool = ToolCalled(
                    at_ms=self.shared.wall_ms(),
                    name=item.name,
                    arguments=item.arguments,
                    result_bytes=item.result_bytes,
                )
                await self._write([tool])
                return None
            case RecordReply():
                await self._write([item.reply])
                meta = self._meta()
                return meta.replies if meta is not None else 0
            case _:
                assert_never(item)

    async def _edit(self, edit: Edit) -> bool:
        index = self.shared.store.index_of(self.stream, edit.message_id)
        if index is None:
            return False
        message = self.shared.store.message(self.stream, index)
        if message is None or message.deleted or message.content == edit.content:
            return False
        self.unleafed.clear()  # before the edit lands: a run started now reads the store
        await self._write(
            [
                MessageEdited(
                    at_ms=edit.at_ms,
                    index=index,
                    message_id=edit.message_id,
                    content=edit.content,
                    attachments=edit.attachments,
                )
            ]
        )
        self.tail.forget()
        self.shared.purge_later(self.stream)
        self._maybe_compress()
        return True

    async def _delete(self, delete: Delete) -> int:
        events: list[AnyEvent] = []
        for message_id in dict.fromkeys(delete.message_ids):
            index = self.shared.store.index_of(self.stream, message_id)
            if index is None:
                continue
            message = self.shared.store.message(self.stream, index)
            if message is not None and not message.deleted:
                deleted = MessageDeleted(at_ms=delete.at_ms, index=index, message_id=message_id)
                events.append(deleted)
        if events:
            self.unleafed.clear()  # before the deletions land, as for an edit
            await self._write(events)
            self.tail.forget()
            self.shared.purge_later(self.stream)
            self._maybe_compress()
        return len(events)

    async def _forget(self, item: ForgetHere) -> StreamErased | None:
        """Erase a person here; compression is stopped first so no old text lands after."""
        await self._stop_compression()
        self.unleafed.clear()
        erased = await erase_in_stream(
            self.shared.store,
            self.stream,
            item.person_hash,
            item.by,
            self.shared.summarizer,
            self._append,
            self.shared.settings,
            self.shared.wall_ms(),
            self.sizes,
        )
        self.tail.forget()
        return erased
