# Eva's slash commands and their confirm buttons: what they are and how they are answered.
#
# Shell, on the asyncio side of trio-asyncio: eva.discord.bot registers the
# commands at start-up and hands every interaction to `handle_interaction`.
# It may not touch the store or the supervisor from asyncio: every store read
# and supervisor call goes through `context.run_trio`. It knows nothing of the
# gateway, and keeps no state between interactions: a button's custom id
# carries everything its press needs.
# Invariants: every answer is ephemeral; every interaction is answered (an
# unexpected failure is logged and answered); a button works only for the
# person it was shown to, and a moderator's button re-checks the permission;
# Eva's own id is never forgotten.
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeVar

import hikari
import trio

from eva.core.events import ForgetBy
from eva.core.keys import StreamId
from eva.core.opt_out import OptedOut
from eva.core.recall import RecallView, render_view
from eva.core.settings import MemorySettings, ModelSettings
from eva.discord import command_texts as texts
from eva.discord.mapping import stream_of
from eva.live.inputs import Recall, Zoom
from eva.live.supervisor import Supervisor
from eva.memory.forget import ErasureFailed, ForgetReport
from eva.memory.person import PersonData, data_files, person_data, summary
from eva.memory.view import RowText, Zoomed, ZoomError, channel_zone, row_lines, tail_messages
from eva.store.event_store import EventStore
from eva.store.opt_outs import read_opt_outs, set_opt_out
from eva.store.switches import Switches

log = logging.getLogger(__name__)

T = TypeVar("T")

FORGET_ME: Final = "forget-me"
MEMORY: Final = "memory"
RECALL: Final = "recall"
ZOOM: Final = "zoom"
PRIVACY: Final = "privacy"
MY_DATA: Final = "my-data"
FORGET_MEMBER: Final = "forget-member"
BACKFILL: Final = "backfill"
MEMORY_HERE: Final = "memory-here"
DONT_REMEMBER_ME: Final = "dont-remember-me"
REMEMBER_ME: Final = "remember-me"
MEMORY_STATES: Final = ("on", "off", "off-and-erase")
# Registered as the default for moderators' commands; either permission passes the check.
UPLOAD_LIMIT_BYTES = 10 * 1024 * 1024
"""Discord's default limit on each file a message carries, 10 MiB since 2025-01-16; an
interaction gives the limit where it is asked (`attachment_size_limit`, larger in a
boosted server). Checked in Discord's API reference, "Uploading Files", 2026-12-07."""
MODERATOR_DEFAULT = hikari.Permissions.MANAGE_MESSAGES
MODERATOR_ANY = hikari.Permissions.MANAGE_MESSAGES | hikari.Permissions.ADMINISTRATOR
ROW_ENDS = 3  # /memory shows this many row entries from each end
RECALL_TEXT_BYTES = 8000


class RunTrio(Protocol):
    """Runs a trio coroutine function from asyncio code and returns its result."""

    def __call__(self, work: Callable[[], Awaitable[T]], /) -> Awaitable[T]: ...


class CommandContext(Protocol):
    """What the commands need from the bot (eva.discord.bot.BotContext has it).

    `backfill(channel_id)` is a trio function like the supervisor's: it runs through
    `run_trio`, fetches the channel's missed history and returns how many messages it stored.
    """

    @property
    def supervisor(self) -> Supervisor: ...
    @property
    def store(self) -> EventStore: ...
    @property
    def eva_id(self) -> int: ...
    @property
    def run_trio(self) -> RunTrio: ...
    @property
    def model_settings(self) -> ModelSettings: ...
    @property
    def memory_settings(self) -> MemorySettings: ...
    @property
    def backfill(self) -> Callable[[int], Awaitable[int]]: ...
    @property
    def switches(self) -> Switches: ...
    @property
    def opted_out(self) -> OptedOut: ...


# -- registering -------------------------------------------------------------------


def command_definitions() -> list[hikari.api.SlashCommandBuilder]:
    """Eva's slash commands, as sent to Discord's bulk overwrite."""
    address = "START+SIZE as shown in /memory, e.g. 0+64; INDEX+1 opens one message"
    member = hikari.CommandOption(
        type=hikari.OptionType.USER, name="member", description="Who to forget", is_required=True
    )
    return [
        _slash(FORGET_ME, "Erase everything you wrote in this server from Eva's memory"),
        _slash(MEMORY, "The first and last lines of what Eva remembers in this channel"),
        _slash(RECALL, "Search this channel's messages, as Eva does", _text("query", "Words")),
        _slash(ZOOM, "Open a line of Eva's memory into its halves", _text("address", address)),
        _slash(PRIVACY, "What Eva stores, for how long, and how to be forgotten"),
        _slash(MY_DATA, "What Eva keeps about you in this server, as a file only you see"),
        _slash(FORGET_MEMBER, "Erase a member's messages from Eva's memory", member, mod=True),
        _slash(BACKFILL, "Fetch the messages of this channel that Eva missed", mod=True),
        _slash(DONT_REMEMBER_ME, "Eva keeps nothing you write in this server from now on"),
        _slash(REMEMBER_ME, "Eva keeps what you write in this server again"),
        _slash(MEMORY_HERE, "Turn Eva's memory of this channel on or off", hikari.CommandOption(
            type=hikari.OptionType.STRING, name="state", description="on, off, or off and "
            "erase what she kept of it", is_required=True,
            choices=[hikari.CommandChoice(name=s, value=s) for s in MEMORY_STATES],
        ), mod=True),
    ]


def _slash(
    name: str, description: str, *options: hikari.CommandOption, mod: bool = False
) -> hikari.api.SlashCommandBuilder:
    builder = hikari.impl.SlashCommandBuilder(
        name,
        description,
        context_types=[hikari.ApplicationContextType.GUILD],
        options=list(options),
    )
    if mod:
        builder.set_default_member_permissions(MODERATOR_DEFAULT)
    return builder


def _text(name: str, description: str) -> hikari.CommandOption:
    return hikari.CommandOption(
        type=hikari.OptionType.STRING, name=name, description=description, is_required=True
    )


async def register_commands(
    rest: hikari.api.RESTClient,
    application_id: hikari.Snowflakeish,
    guild_ids: Sequence[hikari.Snowflakeish],
) -> None:
    """Overwrite the application's commands in each guild given, or globally if none."""
    commands = command_definitions()
    if not guild_ids:
        await rest.set_application_commands(application_id, commands)
    for guild_id in guild_ids:
        await rest.set_application_commands(application_id, commands, guild_id)


# -- buttons -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ButtonId:
    """A confirm or cancel button: who may press it and who it forgets."""

    command: Literal["forget-me", "forget-member"]
    choice: Literal["confirm", "cancel", "always"]  # always: forget me, and keep nothing more
    owner: int
    target: int

    def custom_id(self) -> str:
        if self.command == FORGET_ME:
            return f"{FORGET_ME}:{self.choice}:{self.owner}"
        return f"{FORGET_MEMBER}:{self.choice}:{self.owner}:{self.target}"


def parse_button(custom_id: str) -> ButtonId | None:
    """The button a custom id names, or None if it is not one of Eva's."""
    match custom_id.split(":"):
        case ["forget-me", "confirm" | "cancel" | "always" as choice, owner] if owner.isdigit():
            return ButtonId(FORGET_ME, choice, int(owner), int(owner))
        case ["forget-member", "confirm" | "cancel" as choice, owner, target] if (
            owner.isdigit() and target.isdigit()
        ):
            return ButtonId(FORGET_MEMBER, choice, int(owner), int(target))
        case _:
            return None


def _buttons(
    command: Literal["forget-me", "forget-member"], owner: int, target: int
) -> hikari.api.MessageActionRowBuilder:
    confirm = ButtonId(command, "confirm", owner, target).custom_id()
    cancel = ButtonId(command, "cancel", owner, target).custom_id()
    label = "Forget me" if command == FORGET_ME else "Forget them"
    row = hikari.impl.MessageActionRowBuilder().add_interactive_button(
        hikari.ButtonStyle.DANGER, confirm, label=label
    )
    if command == FORGET_ME:  # and the offer never to keep what they write again
        always = ButtonId(command, "always", owner, target).custom_id()
        row.add_interactive_button(
            hikari.ButtonStyle.DANGER, always, label="Forget me and don't remember me"
        )
    return row.add_interactive_button(hikari.ButtonStyle.SECONDARY, cancel, label="Cancel")


# -- answering ---------------------------------------------------------------------


class _Answer:
    """One interaction's answer: the first call responds, later calls edit that response."""

    def __init__(self, interaction: hikari.CommandInteraction | hikari.ComponentInteraction):
        self.interaction = interaction
        self.started = False

    async def say(
        self,
        text: str,
        components: Sequence[hikari.api.ComponentBuilder] = (),
        attachment: hikari.Resourceish | None = None,
    ) -> None:
        """A new ephemeral message, or (once answered) the answer edited to `text`; an
        `attachment` goes only with an edit (answer `defer` first)."""
        if self.started:
            await self.interaction.edit_initial_response(
                text,
                attachment=attachment if attachment is not None else hikari.UNDEFINED,
                components=components,
                mentions_everyone=False,
                user_mentions=False,
                role_mentions=False,
            )
            return
        self.started = True
        await self.interaction.create_initial_response(
            hikari.ResponseType.MESSAGE_CREATE,
            text,
            flags=hikari.MessageFlag.EPHEMERAL,
            components=components,
            mentions_everyone=False,
            user_mentions=False,
            role_mentions=False,
        )

    async def follow(self, text: str, attachment: hikari.Resourceish) -> None:
        """One more ephemeral message with a file, after the answer."""
        inter = self.interaction
        await inter.app.rest.execute_webhook(
            inter.application_id, inter.token, text, attachment=attachment,
            flags=hikari.MessageFlag.EPHEMERAL, mentions_everyone=False, user_mentions=False,
            role_mentions=False,
        )

    async def defer(self) -> None:
        """Say that the answer comes later (Discord shows "thinking")."""
        self.started = True
        await self.interaction.create_initial_response(
            hikari.ResponseType.DEFERRED_MESSAGE_CREATE, flags=hikari.MessageFlag.EPHEMERAL
        )

    async def update(self, text: str) -> None:
        """Replace the message the pressed button is on, its buttons removed."""
        assert isinstance(self.interaction, hikari.ComponentInteraction)
        if self.started:
            await self.say(text)
            return
        self.started = True
        await self.interaction.create_initial_response(
            hikari.ResponseType.MESSAGE_UPDATE,
            text,
            components=[],
            mentions_everyone=False,
            user_mentions=False,
            role_mentions=False,
        )


async def handle_interaction(
    interaction: hikari.PartialInteraction, context: CommandContext
) -> None:
    """Answer a slash command or a button press; anything else is not Eva's and is left alone."""
    if not isinstance(interaction, hikari.CommandInteraction | hikari.ComponentInteraction):
        return
    answer = _Answer(interaction)
    try:
        if isinstance(interaction, hikari.CommandInteraction):
            await _command(interaction, context, answer)
        else:
            await _press(interaction, context, answer)
    except Exception:
        log.exception("interaction %s failed", _what(interaction))
        try:
            await answer.say(texts.FAILED)
        except Exception:
            log.warning("could not tell the user that interaction %s failed", interaction.id)


def _what(interaction: hikari.CommandInteraction | hikari.ComponentInteraction) -> str:
    if isinstance(interaction, hikari.CommandInteraction):
        return f"/{interaction.command_name}"
    return f"button {interaction.custom_id!r}"


async def _command(
    inter: hikari.CommandInteraction, context: CommandContext, answer: _Answer
) -> None:
    name = inter.command_name
    if name == PRIVACY:
        await answer.say(texts.PRIVACY)
        return
    if inter.guild_id is None:
        await answer.say(texts.NOT_IN_GUILD)
        return
    stream = stream_of(inter.guild_id, inter.channel_id)
    user = int(inter.user.id)
    match name:
        case "forget-me":
            if user == context.eva_id:
                await answer.say(texts.NOT_HERSELF)
                return
            await answer.say(texts.FORGET_ME_ASK, [_buttons(FORGET_ME, user, user)])
        case "forget-member":
            target = _option(inter, "member")
            if not may_moderate(inter.member):
                await answer.say(texts.NOT_MODERATOR)
            elif not isinstance(target, int):
                await answer.say("Pick the member to forget.")
            elif target == context.eva_id:
                await answer.say(texts.NOT_HERSELF)
            else:
                ask = texts.FORGET_MEMBER_ASK.format(name=f"<@{target}>")
                await answer.say(ask, [_buttons(FORGET_MEMBER, user, target)])
        case "my-data":
            await answer.defer()
            limit = getattr(inter, "attachment_size_limit", None) or UPLOAD_LIMIT_BYTES
            data, files = await context.run_trio(
                lambda: trio.to_thread.run_sync(_my_data, context.store, user, stream, limit)
            )
            if files is None:
                await answer.say(texts.my_data_too_large(summary(data)))
                return
            (first, content), *more = files
            await answer.say(
                texts.my_data(summary(data), len(files)),
                attachment=hikari.Bytes(content, first),
            )
            for name, content in more:
                await answer.follow(texts.my_data_part(name), hikari.Bytes(content, name))
        case "memory":
            await answer.say(await _memory(context, stream))
        case "recall":
            await answer.say(await _recall(context, stream, str(_option(inter, "query") or "")))
        case "zoom":
            await answer.say(await _zoom(context, stream, str(_option(inter, "address") or "")))
        case "dont-remember-me" | "remember-me":
            out = name == DONT_REMEMBER_ME
            await context.run_trio(lambda: _opt(context, stream.guild_id, user, out))
            await answer.say(texts.DONT_REMEMBER_ME if out else texts.REMEMBER_ME)
        case "memory-here":
            state = str(_option(inter, "state") or "")
            if not may_moderate(inter.member):
                await answer.say(texts.NOT_MODERATOR)
            elif state not in MEMORY_STATES:
                await answer.say(texts.memory_here_states(MEMORY_STATES))
            else:
                await context.run_trio(lambda: _turn(context, stream, state))
                await answer.say(texts.memory_here(state, f"<#{stream.channel_id}>"))
        case "backfill":
            if not may_moderate(inter.member):
                await answer.say(texts.NOT_MODERATOR)
                return
            await answer.defer()
            stored = await context.run_trio(lambda: context.backfill(stream.channel_id))
            await answer.say(texts.backfilled(stored))
        case _:
            await answer.say(texts.unknown_command(name))


def _option(inter: hikari.CommandInteraction, name: str) -> str | int | float | bool | None:
    for option in inter.options or ():
        if option.name == name:
            return option.value
    return None


def may_moderate(member: hikari.InteractionMember | None) -> bool:
    """Whether a member may use the moderators' commands here."""
    return member is not None and bool(member.permissions & MODERATOR_ANY)


async def _opt(context: CommandContext, guild_id: int, user: int, out: bool) -> None:
    """The person's "don't remember me" (or its undoing), stored, then in force at once."""
    now_ms = context.supervisor.shared.wall_ms()
    await trio.to_thread.run_sync(set_opt_out, context.store, guild_id, user, out, "self", now_ms)
    context.opted_out.people = set(read_opt_outs(context.store))


async def _turn(context: CommandContext, stream: StreamId, state: str) -> None:
    """The moderator's switch, on the trio side: stored, then (off and erase) the
    channel's erasure recorded, done once nothing of it is being worked on."""
    now_ms = context.supervisor.shared.wall_ms()
    await trio.to_thread.run_sync(
        context.switches.turn, stream, state == "on", "moderator", now_ms
    )
    if state == "off-and-erase":
        await context.supervisor.erase_channel(stream, "moderator")


def _my_data(
    store: EventStore, user: int, stream: StreamId, limit: int
) -> tuple[PersonData, list[tuple[str, bytes]] | None]:
    """/my-data's data and its files, read in a worker thread: a long history takes
    seconds, which the bot's loop must not wait through."""
    data = person_data(store, user, stream.guild_id)
    return data, data_files(data, f"eva-data-{user}", limit)


async def _read(context: CommandContext, read: Callable[[], T]) -> T:
    """A quick store read, done on the trio side."""

    async def on_trio() -> T:
        return read()

    return await context.run_trio(on_trio)


async def _memory(context: CommandContext, stream: StreamId) -> str:
    settings = context.memory_settings
    summary = await _read(context, lambda: read_memory(context.store, stream, settings))
    return texts.NO_MEMORY if summary is None else texts.memory_text(summary)


def read_memory(
    store: EventStore, stream: StreamId, settings: MemorySettings
) -> texts.MemorySummary | None:
    """The /memory figures of a channel, or None when Eva has none of its messages."""
    meta = store.meta(stream)
    if meta is None:
        return None
    lines = row_lines(store, stream, channel_zone(meta, settings), RowText())
    tail = tail_messages(store, stream)
    few = len(lines) <= 2 * ROW_ENDS
    return texts.MemorySummary(
        first=tuple(lines if few else lines[:ROW_ENDS]),
        last=() if few else tuple(lines[-ROW_ENDS:]),
        row_lines=len(lines),
        row_bytes=meta.row_bytes,
        frontier=meta.row_frontier,
        tail_messages=len(tail),
        tail_bytes=meta.tail_bytes,
        messages=meta.messages,
        deleted=meta.deleted,
    )


async def _recall(context: CommandContext, stream: StreamId, query: str) -> str:
    if not query.strip():
        return "Give some words to search for."
    if await _read(context, lambda: context.store.meta(stream)) is None:
        return texts.NO_MEMORY
    view = await context.run_trio(lambda: context.supervisor.ask(stream, Recall(query=query)))
    assert isinstance(view, RecallView)
    return texts.fitted_block(render_view(view, RECALL_TEXT_BYTES))


async def _zoom(context: CommandContext, stream: StreamId, address: str) -> str:
    if await _read(context, lambda: context.store.meta(stream)) is None:
        return texts.NO_MEMORY
    try:
        zoomed = await context.run_trio(
            lambda: context.supervisor.ask(stream, Zoom(address=address.strip()))
        )
    except ZoomError as error:
        return texts.fit(f"Cannot zoom there: {error}".replace("\n", " "))
    assert isinstance(zoomed, Zoomed)
    return texts.fitted_block(zoomed.text)


async def _press(
    inter: hikari.ComponentInteraction, context: CommandContext, answer: _Answer
) -> None:
    button = parse_button(inter.custom_id)
    if button is None or inter.guild_id is None:
        await answer.say(texts.STALE_BUTTON)
        return
    if int(inter.user.id) != button.owner:
        await answer.say(texts.NOT_YOURS)
        return
    moderator = button.command == FORGET_MEMBER
    if moderator and not may_moderate(inter.member):
        await answer.say(texts.NOT_MODERATOR)
        return
    if button.target == context.eva_id:
        await answer.update(texts.NOT_HERSELF)
        return
    if button.choice == "cancel":
        await answer.update(texts.CANCELLED)
        return
    await answer.update(texts.FORGETTING)
    guild = int(inter.guild_id)
    if button.choice == "always":  # kept out first: nothing they write meanwhile is kept
        await context.run_trio(lambda: _opt(context, guild, button.owner, True))
    by: ForgetBy = "moderator" if moderator else "self"
    if moderator:
        log.info("moderator %s forgets a member in guild %s", button.owner, guild)
    who = f"<@{button.target}>" if moderator else "you"
    await context.run_trio(
        lambda: context.supervisor.record_forget(button.target, guild_id=guild, by=by)
    )
    await answer.update(texts.forget_recorded(who))  # said once the tombstones are durable
    try:
        report = await context.run_trio(
            lambda: context.supervisor.forget(button.target, guild_id=guild, by=by)
        )
    except ErasureFailed:
        log.exception("ERASURE NOT VERIFIED: a forget asked for in Discord (guild %s)", guild)
        await answer.update(texts.ERASURE_UNVERIFIED)
        return
    assert isinstance(report, ForgetReport)
    done = texts.forget_done(report, who)
    await answer.update(f"{done} {texts.KEPT_OUT_TOO}" if button.choice == "always" else done)
