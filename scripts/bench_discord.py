"""Benchmark the Discord bot: the shared sample through the fake gateway into one bot process.

The real hikari client (under trio-asyncio) connects to the fake Discord on loopback, which
runs with its pusher in a child process, and the fake Messages API in another (each with its
own GIL, as Discord's and Anthropic's servers would be); the pusher posts
the sample's 45,707 messages (read in place, never copied) as their authors, as fast as the
bot takes them (at most --window messages sent and not yet durable, handed to the fake's loop
PUSH_CHUNK at a time; the bot process's CPU time per message is the steadier figure on a
shared machine), and every
--mention-every-th message mentions Eva (mention-to-reply counts from the fake sending it to
the fake receiving the reply, so it includes the wait behind the window; "apart from model"
takes off the time the reply's model calls took, as Eva's SDK client saw it; the "durable" one
counts from the mention being stored, and is below zero when Eva answered before her store
acknowledged it, as she does when only messages wait ahead of it). The fake Messages API
answers at once; lines are written offline. Two phases: the sample in its one channel as it
is (every message goes through one channel actor, one after the other), and the sample
spread over --channels channels of one guild (message i to channel i % channels, each in
the sample's order), as a shard carrying many busy channels would see it. The last line
printed is one JSON object; its headline figures are the single-channel phase's.

    python scripts/bench_discord.py [--limit N] [--channels 16] [--window 256]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

import trio

from eva.cli.cmd_import import read_export
from eva.core.dce import export_events, parse_export
from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.core.summarize import OfflineSummarizer
from eva.discord.bot import EvaBot
from eva.discord.process import run_bot
from eva.live.inputs import Post, post_of
from eva.testing.fake_anthropic import FakeMessagesAPI
from eva.testing.fake_discord import FakeDiscord, Posting, User, snowflake_time_ms

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"
ANSWER = "Here is what I remember."
PHASE_LIMIT_S = 900.0
PUSH_CHUNK = 16
"""Messages the pusher hands to the fake's loop at once (each still its own dispatch)."""


def note(text: str) -> None:
    print(f"bench_discord: {text}", file=sys.stderr, flush=True)


def p99_ms(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    if not ordered:
        return 0.0
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


def p50_ms(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return round(ordered[len(ordered) // 2] * 1000, 3) if ordered else 0.0


def load_posts(limit: int) -> list[Post]:
    export = parse_export(read_export(SAMPLE))
    posts = [post_of(e) for e in export_events(export, None, lambda _: None)
             if isinstance(e, MessagePosted)]
    return posts[:limit] if limit else posts


def fake_side(
    link: Connection,
    limit: int,
    channel_count: int,
    mention_every: int,
    window: int,
    durable: Synchronized[int],
) -> None:
    """The child process: the fake Discord and the pusher (its own GIL, as Discord would be).

    Its cyclic garbage collector is off. The fake keeps every message it posts, and a full
    collection over that heap stops the pusher and the fake's REST for 150-330 ms
    (measured), which the bot would be charged for: Discord's servers do not pause for
    this process's collector. The pusher makes little garbage and the process ends with
    the phase.
    """
    gc.disable()
    posts = load_posts(limit)
    fake = FakeDiscord()
    users: dict[int, User] = {}
    for post in posts:
        if post.author_id not in users:
            users[post.author_id] = fake.add_user(post.author_name[:32] or "someone")
    names = [f"general-{i}" for i in range(channel_count)] if channel_count > 1 else ["general"]
    guild = fake.add_guild("komodo", channels=names)
    channels = [c.id for c in guild.channels]
    eva = fake.bot_user
    sent: dict[int, float] = {}
    mentions: list[int] = []
    with fake.serve():
        link.send((fake.token, fake.rest_url))
        assert link.recv() == "go"
        i = 0
        while i < len(posts):
            # As fast as the bot takes them; Discord's REST does not slow down for the
            # gateway's traffic, so the pusher lets a REST call (Eva's reply) go first.
            while (room := window - (i - durable.value)) <= 0 or fake.rest_in_flight:
                time.sleep(0.0002)
            postings = []
            for j in range(i, min(len(posts), i + min(room, PUSH_CHUNK))):
                post = posts[j]
                content = post.content[:1900] or "(attachment)"
                mentioned: list[User] = []
                if mention_every and j % mention_every == mention_every - 1:
                    content = f"<@{eva.id}> {content}"[:1990]
                    mentioned = [eva]
                postings.append(Posting(guild.id, channels[j % len(channels)],
                                        users[post.author_id], content, mentioned))
            started = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
            for posting, message in zip(postings, fake.post_messages(postings), strict=True):
                sent[int(message["id"])] = started  # the chunk's start: no later than its own
                if posting.mentions:
                    mentions.append(int(message["id"]))
            i += len(postings)
        link.send((sent, mentions))
        while link.recv() == "replies?":
            replies = [
                (int(r["id"]), int(r["message_reference"]["message_id"]))
                for r in fake.bot_messages()
            ]
            link.send(replies)
        link.send(fake.errors == [])


def answer_at_once(body: dict[str, Any]) -> str:
    return ANSWER


def model_side(link: Connection) -> None:
    """The other child: the fake Messages API, answering at once; reports its request count."""
    model = FakeMessagesAPI(answer=answer_at_once)
    with model.serve():
        link.send((model.url, model.key))
        link.recv()
        link.send(len(model.message_requests()))


@dataclass
class Durable:
    """When each person's message became durable (perf_counter seconds), by message id."""

    counter: Synchronized[int]
    at: dict[int, float] = field(default_factory=dict)
    wall_ms: dict[int, float] = field(default_factory=dict)  # for mentions: the fake's clock

    def on_stored(self, stream: StreamId, post: Post, index: int | None) -> None:
        if post.bot:
            return
        self.at.setdefault(post.message_id, time.perf_counter())
        if "<@" in post.content or post.content.startswith("@"):
            self.wall_ms.setdefault(post.message_id, time.time() * 1000)
        self.counter.value += 1


async def phase(limit: int, channel_count: int, mention_every: int, window: int,
                data: Path) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    counter: Synchronized[int] = context.Value("q", 0, lock=False)
    link, child_link = context.Pipe()
    child = context.Process(
        target=fake_side,
        args=(child_link, limit, channel_count, mention_every, window, counter),
        daemon=True,
    )
    child.start()
    model_link, model_child_link = context.Pipe()
    model_child = context.Process(target=model_side, args=(model_child_link,), daemon=True)
    model_child.start()
    token, rest_url = await trio.to_thread.run_sync(link.recv)
    model_url, model_key = await trio.to_thread.run_sync(model_link.recv)
    durable = Durable(counter)
    run = partial(
        run_bot,
        token,
        data,
        rest_url=rest_url,
        anthropic_key=model_key,
        anthropic_base_url=model_url,
        handle_signals=False,
        on_stored=durable.on_stored,
        summarizer=OfflineSummarizer(),
    )
    async with trio.open_nursery() as nursery:
        with trio.fail_after(60):
            eva: EvaBot = await nursery.start(run)
        await trio.sleep(0.5)  # the guild's GUILD_CREATE first
        note(f"pushing {limit or 'all'} messages into {channel_count} channel(s)")
        started = time.perf_counter()
        cpu_started = time.process_time()  # every thread of this, the bot's, process
        link.send("go")
        with trio.fail_after(PHASE_LIMIT_S):
            sent, mentions = await trio.to_thread.run_sync(link.recv)
            while len(durable.at) < len(sent):  # noqa: ASYNC110 - filled by a hook
                await trio.sleep(0.01)
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
        with trio.fail_after(60):
            while True:
                link.send("replies?")
                replies = await trio.to_thread.run_sync(link.recv)
                if len(replies) >= len(mentions):
                    break
                await trio.sleep(0.05)
        stats = eva.supervisor.statistics()
        model_s = dict(eva.answerer.model_seconds)  # by question: the reply's model call time
        eva.stop()
    link.send("done")
    fake_ok = await trio.to_thread.run_sync(link.recv)
    model_link.send("done")
    model_requests = await trio.to_thread.run_sync(model_link.recv)
    await trio.to_thread.run_sync(child.join, 10)
    await trio.to_thread.run_sync(model_child.join, 10)
    # Each snowflake carries the fake's clock (ms) when the fake made the message.
    reply_ms = [snowflake_time_ms(reply) - snowflake_time_ms(question)
                for reply, question in replies]
    apart_ms = [ms - model_s[question] * 1000
                for ms, (_, question) in zip(reply_ms, replies, strict=True) if question in model_s]
    stored_ms = [snowflake_time_ms(reply) - durable.wall_ms[question]
                 for reply, question in replies if question in durable.wall_ms]
    latencies = [durable.at[m] - sent[m] for m in sent if m in durable.at]
    return {
        "channels": channel_count,
        "messages": len(sent),
        "seconds": round(seconds, 3),
        "gateway_msgs_per_s": round(len(sent) / seconds),
        "bot_cpu_us_per_msg": round(cpu_seconds / len(sent) * 1e6, 1),
        "p50_ms_gateway_to_durable": p50_ms(latencies),
        "p99_ms_gateway_to_durable": p99_ms(latencies),
        "stored": len(durable.at),
        "mentions": len(mentions),
        "replies": len(replies),
        "model_requests": model_requests,
        "p50_ms_mention_to_reply": p50_ms([ms / 1000 for ms in reply_ms]),
        "p99_ms_mention_to_reply": p99_ms([ms / 1000 for ms in reply_ms]),
        "p99_ms_mention_to_reply_apart_from_model": p99_ms([ms / 1000 for ms in apart_ms]),
        "p50_ms_model_call": p50_ms(list(model_s.values())),
        "p99_ms_model_call": p99_ms(list(model_s.values())),
        "p99_ms_durable_mention_to_reply": p99_ms([ms / 1000 for ms in stored_ms]),
        "slowest_ms_mention_to_reply": sorted(reply_ms)[-5:],
        "commits": stats.commits,
        "fake_errors": not fake_ok,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N messages")
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--mention-every", type=int, default=500)
    parser.add_argument("--window", type=int, default=256)
    args = parser.parse_args()
    if not SAMPLE.exists():
        note(f"the shared sample is not at {SAMPLE}: skipped")
        print(json.dumps({"skipped": f"no sample at {SAMPLE}"}))
        return 0
    results = []
    for channels in (1, args.channels):
        with tempfile.TemporaryDirectory(prefix="bench-discord-") as tmp:
            result = trio.run(phase, args.limit, channels, args.mention_every, args.window,
                              Path(tmp))
        note(json.dumps(result))
        results.append(result)
    one, many = results
    summary = {
        "messages": one["messages"],
        "gateway_msgs_per_s": one["gateway_msgs_per_s"],
        "p99_ms_gateway_to_durable": one["p99_ms_gateway_to_durable"],
        "replies": one["replies"],
        "p99_ms_mention_to_reply": one["p99_ms_mention_to_reply"],
        "p99_ms_mention_to_reply_apart_from_model": one["p99_ms_mention_to_reply_apart_from_model"],
        "p99_ms_durable_mention_to_reply": one["p99_ms_durable_mention_to_reply"],
        "one_channel": one,
        f"{args.channels}_channels": many,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
