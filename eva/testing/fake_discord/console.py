# A fake Discord to try Eva in, typed into from a terminal: `eva fake-discord`.
#
# Shell: it serves the fake (one server, two channels, a few members) on a fixed loopback
# port, reads lines from standard input and acts them out as the members would (posts,
# mentions of Eva, edits, deletions, slash commands, buttons), and prints what the bot
# does (connects, answers, edits its answers) as it happens. `eva run --discord-url` in
# another terminal is the bot, exactly as it runs against Discord.
# Invariants: a line never reaches the bot as anything but what a member could do in
# Discord; an unknown command or member is refused with what is known, nothing posted.
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from eva.testing.fake_discord.server import FakeDiscord
from eva.testing.fake_discord.world import JSON, MESSAGE_FLAG_EPHEMERAL, Channel, Guild, User

MEMBERS = ("ann", "bo", "cy")
SERVER = "try-eva"
CHANNELS = ("general", "random")
WATCH_SECONDS = 0.2
COMMANDS_WITH_TEXT = {"recall": "query", "zoom": "address", "memory-here": "state"}
COMMANDS_PLAIN = (
    "privacy", "memory", "my-data", "forget-me", "backfill", "dont-remember-me", "remember-me"
)
HELP = """\
Type a line to post it as the member you are (the first one at the start).
  Bo: text          post as Bo (and be Bo from then on)
  @Eva ...          mention Eva, so that she answers
  /as NAME          be another member          /in CHANNEL   post in another channel
  /edit TEXT        edit your last message     /delete       delete your last message
  /privacy /memory /my-data /forget-me /backfill /dont-remember-me /remember-me
  /recall WORDS     /zoom ADDRESS              Eva's slash commands, as you
  /memory-here on|off|off-and-erase            the moderator's channel switch
  /forget-member NAME                          the moderator's forget, as you
  /confirm /always /cancel   press that button of Eva's last question to you
  /who              the members and channels   /help         this text
Ctrl-D (or /quit) stops the fake Discord."""


@dataclass
class Console:
    """The fake, its one server, and who is typing where."""

    fake: FakeDiscord
    guild: Guild
    members: dict[str, User]
    me: User
    channel: Channel
    out: TextIO
    last_posted: dict[int, JSON] = field(default_factory=dict)  # member id -> their last post
    printed: dict[int, str] = field(default_factory=dict)  # bot message id -> what was shown
    sessions: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def say(self, text: str) -> None:
        with self.lock:
            print(text, file=self.out, flush=True)


def world(fake: FakeDiscord, names: Sequence[str]) -> tuple[Guild, dict[str, User]]:
    """The server to try Eva in: `names` as members, then the server (with Eva in it)."""
    members = {name.casefold(): fake.add_user(name) for name in names}
    return fake.add_guild(SERVER, channels=CHANNELS), members


def console_for(fake: FakeDiscord, names: Sequence[str], out: TextIO) -> Console:
    guild, members = world(fake, names)
    first = members[names[0].casefold()]
    return Console(fake, guild, members, first, guild.general, out)


def act(console: Console, line: str) -> bool:
    """Do what one typed line says; False when it says to stop."""
    text = line.strip()
    if not text:
        return True
    if text.startswith("/"):
        return _command(console, text)
    speaker = re.match(r"^([\w.-]+):\s+(.*)$", text)
    if speaker and speaker.group(1).casefold() in console.members:
        console.me = console.members[speaker.group(1).casefold()]
        text = speaker.group(2)
    _post(console, text)
    return True


def _post(console: Console, text: str) -> None:
    bot = console.fake.bot_user
    mentioned = re.search(rf"@{re.escape(bot.username)}\b", text, re.IGNORECASE) is not None
    content = re.sub(rf"@{re.escape(bot.username)}\b", f"<@{bot.id}>", text, flags=re.IGNORECASE)
    posted = console.fake.post_message(
        console.guild.id, console.channel.id, console.me, content,
        mentions=[bot] if mentioned else [],
    )
    console.last_posted[console.me.id] = posted


def _command(console: Console, text: str) -> bool:
    name, _, rest = text[1:].partition(" ")
    name, rest = name.casefold(), rest.strip()
    fake, guild = console.fake, console.guild
    if name in ("quit", "exit"):
        return False
    if name == "help":
        console.say(HELP)
    elif name == "who":
        console.say(
            f"you are {console.me.username} in #{console.channel.name}; members: "
            f"{', '.join(u.username for u in console.members.values())}; channels: "
            f"{', '.join('#' + c.name for c in guild.channels)}"
        )
    elif name == "as":
        member = console.members.get(rest.casefold())
        if member is None:
            console.say(f"no member {rest!r}; the members are {_names(console.members.values())}")
        else:
            console.me = member
    elif name == "in":
        channel = next((c for c in guild.channels if c.name == rest.lstrip("#")), None)
        if channel is None:
            console.say(f"no channel {rest!r}; the channels are "
                        f"{', '.join('#' + c.name for c in guild.channels)}")
        else:
            console.channel = channel
    elif name in ("edit", "delete"):
        last = console.last_posted.get(console.me.id)
        if last is None:
            console.say(f"{console.me.username} has posted nothing to {name} here")
        elif name == "edit":
            console.last_posted[console.me.id] = fake.edit_message(last, rest)
        else:
            fake.delete_message(last)
            del console.last_posted[console.me.id]
    elif name in COMMANDS_PLAIN:
        fake.slash_command(guild.id, console.channel.id, console.me, name)
    elif name in COMMANDS_WITH_TEXT and rest:
        options = {COMMANDS_WITH_TEXT[name]: rest}
        fake.slash_command(guild.id, console.channel.id, console.me, name, options)
    elif name == "forget-member" and rest.casefold() in console.members:
        target = str(console.members[rest.casefold()].id)
        fake.slash_command(guild.id, console.channel.id, console.me, name, [
            {"name": "member", "type": 6, "value": target}
        ])
    elif name in ("confirm", "always", "cancel"):
        _press(console, name)
    else:
        console.say(f"not understood: {text!r} (/help lists what can be typed)")
    return True


def _press(console: Console, which: str) -> None:
    """Press the `which` button of the newest bot message that has one."""
    for message in reversed(console.fake.bot_messages()):
        for custom_id in _button_ids(message.get("components") or []):
            if custom_id.split(":")[1:2] == [which]:
                console.fake.press_button(
                    console.guild.id, int(message["channel_id"]), console.me, custom_id, message
                )
                return
    console.say(f"no question of Eva's has a {which} button")


def _button_ids(components: Iterable[JSON]) -> list[str]:
    found: list[str] = []
    for component in components:
        if component.get("custom_id"):
            found.append(str(component["custom_id"]))
        found.extend(_button_ids(component.get("components") or []))
    return found


def _names(users: Iterable[User]) -> str:
    return ", ".join(u.username for u in users)


def watch(console: Console, stop: threading.Event) -> None:
    """Print, until `stop`, Eva's connecting and every message of hers as it comes or
    changes: her answers, command responses (marked when only the asker sees them)."""
    while not stop.wait(WATCH_SECONDS):
        report(console)


def report(console: Console) -> None:
    """Print what changed since the last look."""
    sessions = len(console.fake._sessions)
    if sessions != console.sessions:
        console.sessions = sessions
        console.say("* Eva is connected" if sessions else "* Eva is not connected")
    channels = {c.id: c.name for c in (*console.guild.channels, *console.guild.threads)}
    for message in console.fake.bot_messages():
        shown = _shown(message)
        mid = int(message["id"])
        if not shown or console.printed.get(mid) == shown:
            continue
        again = " (edited)" if mid in console.printed else ""
        hidden = int(message.get("flags") or 0) & MESSAGE_FLAG_EPHEMERAL
        only = ", only you see it" if hidden else ""
        console.printed[mid] = shown
        where = channels.get(int(message["channel_id"]), "?")
        console.say(f"Eva in #{where}{again}{only}: {shown}")


def _shown(message: JSON) -> str:
    content = "\n    ".join(str(message.get("content") or "").splitlines())
    files = [f"{a.get('filename')} ({int(a.get('size') or 0):,} bytes)"
             for a in message.get("attachments") or []]
    buttons = [c.split(":")[1] for c in _button_ids(message.get("components") or [])
               if c.count(":") >= 1]
    parts = [content] if content else []
    if files:
        parts.append(f"[files: {', '.join(files)}]")
    if buttons:
        parts.append(f"[buttons: {', '.join('/' + b for b in buttons)}]")
    return " ".join(parts)


def run_console(
    fake: FakeDiscord,
    console: Console,
    lines: Iterable[str],
    *,
    port: int,
    started: Callable[[FakeDiscord], None],
) -> None:
    """Serve the fake on `port`, call `started`, act out `lines` until they end or a
    line says to stop, printing what the bot does meanwhile."""
    stop = threading.Event()
    with fake.serve(port=port):
        started(fake)
        watcher = threading.Thread(target=watch, args=(console, stop), daemon=True)
        watcher.start()
        try:
            for line in lines:
                if not act(console, line):
                    break
        finally:
            stop.set()
            watcher.join()
            report(console)
