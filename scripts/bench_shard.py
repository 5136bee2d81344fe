"""The bot at a real shard's load, and the same load while the model and the gateway fail.

A busy Discord shard sees a few hundred messages a second over a few thousand channels.
This runs the real bot (hikari under trio-asyncio, one process) against the fake Discord
and the fake Messages API, each in a process of its own: messages are posted at a steady
--rate over --channels channels (in guilds of ten), as people of a small crowd, and one in
--mention-every mentions Eva. With --faults, for the middle third of the run the fake
Messages API answers in turn 429 (rate limited), 529 (overloaded), 500 and a request that
hangs past the client's time-out, and the fake gateway drops the connection twice (once
cut, once asked to reconnect); hikari resumes and Discord replays what it missed.

At the end it waits until every message is durable and every mention has its reply, stops
the bot, reads the data directory and reports: messages sent, stored, lost and stored
twice; mentions answered, apologised for (the model failed after its retries) and left
without a reply; gateway-to-durable p50/p99, mention-to-reply p99 whole and apart from the
reply's model calls; the bot process's CPU per message and peak memory. No shared data is
needed. The last line printed is one JSON object.

    python scripts/bench_shard.py [--rate 300] [--seconds 60] [--channels 2000] [--faults]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import random
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

import msgspec
import trio

from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, ModelSettings
from eva.core.summarize import OfflineSummarizer
from eva.discord.bot import EvaBot
from eva.discord.process import run_bot
from eva.live.inputs import Post
from eva.model.prompts import APOLOGY_TEXT
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.testing.fake_anthropic import OVERLOADED, Failure, FakeMessagesAPI, rate_limited
from eva.testing.fake_discord import FakeDiscord, Posting, snowflake_time_ms

ANSWER = "Here is what I remember."
CHANNELS_PER_GUILD = 10
PEOPLE = 60
HANG_S = 8.0
MODEL_TIMEOUT_S = 4.0
DRAIN_S = 300.0
WORDS = ("the trip", "board game", "Friday", "the cat", "pizza", "tickets", "at 7pm",
         "the station", "Gerald", "a new laptop", "the fair", "the print run")


def note(text: str) -> None:
    print(f"bench_shard: {text}", file=sys.stderr, flush=True)


def quantile_ms(samples: Sequence[float], share: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return 0.0
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000, 2)


# -- the fake Discord and the pusher, in a process of their own ---------------------------


def discord_side(
    link: Connection, rate: float, seconds: float, channel_count: int, mention_every: int,
    faults: bool, seed: int,
) -> None:
    gc.disable()  # the fake keeps every message; its pauses are not the bot's
    rng = random.Random(seed)
    fake = FakeDiscord()
    people = [fake.add_user(f"person{i}") for i in range(PEOPLE)]
    channels: list[tuple[int, int]] = []
    for g in range(max(1, channel_count // CHANNELS_PER_GUILD)):
        names = [f"room-{c}" for c in range(CHANNELS_PER_GUILD)]
        guild = fake.add_guild(f"guild-{g}", channels=names)
        channels.extend((guild.id, c.id) for c in guild.channels)
    channels = channels[:channel_count]
    eva = fake.bot_user
    total = int(rate * seconds)
    sent: dict[int, float] = {}
    mentions: list[int] = []
    drops = [seconds / 3 + 2, seconds / 2] if faults else []
    with fake.serve():
        link.send((fake.token, fake.rest_url))
        assert link.recv() == "go"
        started = time.perf_counter()
        i = 0
        while i < total:
            now = time.perf_counter() - started
            if drops and now >= drops[0]:
                drops.pop(0)
                if len(drops) == 1:
                    fake.drop_connection(0)  # cut: hikari reconnects and resumes
                else:
                    fake.send_reconnect(0)  # Discord asks for a reconnect
            due = min(total, int(now * rate) + 1)
            if due <= i:
                time.sleep(0.002)
                continue
            postings = []
            for j in range(i, due):
                guild_id, channel_id = channels[rng.randrange(len(channels))]
                author = people[rng.randrange(PEOPLE)]
                text = f"message {j}: about {rng.choice(WORDS)} and {rng.choice(WORDS)}"
                mentioned = []
                if mention_every and j % mention_every == mention_every - 1:
                    text = f"<@{eva.id}> what did we say about {rng.choice(WORDS)}?"
                    mentioned = [eva]
                postings.append(Posting(guild_id, channel_id, author, text, mentioned))
            at = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
            for posting, message in zip(postings, fake.post_messages(postings), strict=True):
                sent[int(message["id"])] = at
                if posting.mentions:
                    mentions.append(int(message["id"]))
            i = due
        link.send((sent, mentions, time.perf_counter() - started))
        while link.recv() == "replies?":
            link.send([
                (int(r["id"]), int(r["message_reference"]["message_id"]), r.get("content", ""))
                for r in fake.bot_messages()
            ])
        link.send({"errors": [repr(e) for e in fake.errors], "resumes": fake.resumes(),
                   "identifies": fake.identifies()})


# -- the fake Messages API, in another ---------------------------------------------------


def model_side(link: Connection, faults: bool, seconds: float) -> None:
    model = FakeMessagesAPI(answer=lambda body: ANSWER)
    failures = [rate_limited(0.5), OVERLOADED, Failure(500), Failure(hang_s=HANG_S)]
    served: Counter[str] = Counter()
    with model.serve():
        link.send((model.url, model.key))
        assert link.recv() == "go"
        if faults:
            time.sleep(seconds / 3)
            end = time.monotonic() + seconds / 3
            turn = 0
            while time.monotonic() < end:  # keep a failure waiting for every next request
                with model._lock:
                    while len(model.script) < 4:
                        failure = failures[turn % len(failures)]
                        model.script.append(failure)
                        served[str(failure.status if not failure.hang_s else "hang")] += 1
                        turn += 1
                time.sleep(0.01)
            with model._lock:
                for failure in model.script:  # not served: not counted
                    served[str(failure.status if not failure.hang_s else "hang")] -= 1
                model.script.clear()
        link.recv()
        link.send((len(model.message_requests()), dict(served)))


# -- the bot, in this process ------------------------------------------------------------


@dataclass
class Durable:
    counter: Synchronized[int]
    at: dict[int, float] = field(default_factory=dict)

    def on_stored(self, stream: StreamId, post: Post, index: int | None) -> None:
        if post.bot or post.message_id in self.at:
            return
        self.at[post.message_id] = time.perf_counter()
        self.counter.value += 1


async def run(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    counter: Synchronized[int] = context.Value("q", 0, lock=False)
    link, child_link = context.Pipe()
    discord = context.Process(
        target=discord_side,
        args=(child_link, args.rate, args.seconds, args.channels, args.mention_every,
              args.faults, args.seed),
        daemon=True,
    )
    discord.start()
    model_link, model_child_link = context.Pipe()
    model = context.Process(
        target=model_side, args=(model_child_link, args.faults, args.seconds), daemon=True
    )
    model.start()
    token, rest_url = await trio.to_thread.run_sync(link.recv)
    model_url, model_key = await trio.to_thread.run_sync(model_link.recv)
    durable = Durable(counter)
    models = ModelSettings(request_timeout_seconds=MODEL_TIMEOUT_S, retries=3)
    live = LiveSettings(model_timeout_seconds=MODEL_TIMEOUT_S * 4, retry_first_seconds=0.5,
                        retry_most_seconds=4.0)
    bot = partial(
        run_bot, token, data, rest_url=rest_url, anthropic_key=model_key,
        anthropic_base_url=model_url, handle_signals=False, on_stored=durable.on_stored,
        summarizer=OfflineSummarizer(), models=models, live=live,
    )
    async with trio.open_nursery() as nursery:
        with trio.fail_after(120):
            eva: EvaBot = await nursery.start(bot)
        await trio.sleep(2.0)  # every GUILD_CREATE first
        note(f"{args.rate:g} messages a second for {args.seconds:g} s over {args.channels} "
             f"channels, a mention in {args.mention_every}{', with faults' if args.faults else ''}")
        cpu_started = time.process_time()
        link.send("go")
        model_link.send("go")
        sent, mentions, push_s = await trio.to_thread.run_sync(link.recv)
        cpu_seconds = time.process_time() - cpu_started
        with trio.move_on_after(DRAIN_S):
            while len(durable.at) < len(sent):  # noqa: ASYNC110 - filled by a hook
                await trio.sleep(0.05)
        replies: list[tuple[int, int, str]] = []
        with trio.move_on_after(DRAIN_S):
            while True:
                link.send("replies?")
                replies = await trio.to_thread.run_sync(link.recv)
                if len({question for _, question, _ in replies}) >= len(mentions):
                    break
                await trio.sleep(0.5)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        model_s = dict(eva.answerer.model_seconds)
        eva.stop()
    link.send("done")
    fake = await trio.to_thread.run_sync(link.recv)
    model_link.send("done")
    model_requests, failures = await trio.to_thread.run_sync(model_link.recv)
    await trio.to_thread.run_sync(discord.join, 10)
    await trio.to_thread.run_sync(model.join, 10)
    stored = stored_ids(data)
    counts = Counter(stored)
    first_reply: dict[int, tuple[int, str]] = {}
    for reply, question, text in replies:
        first_reply.setdefault(question, (reply, text))
    reply_ms = [snowflake_time_ms(r) - snowflake_time_ms(q) for q, (r, _) in first_reply.items()]
    apart_ms = [snowflake_time_ms(r) - snowflake_time_ms(q) - model_s[q] * 1000
                for q, (r, _) in first_reply.items() if q in model_s]
    latencies = [durable.at[m] - sent[m] for m in sent if m in durable.at]
    apologies = sum(text == APOLOGY_TEXT for _, text in first_reply.values())
    return {
        "rate": args.rate,
        "seconds": args.seconds,
        "push_s": round(push_s, 1),
        "channels": args.channels,
        "faults": args.faults,
        "messages": len(sent),
        "stored": sum(1 for m in sent if counts[m] >= 1),
        "lost": sum(1 for m in sent if counts[m] == 0),
        "stored_twice": sum(1 for m in sent if counts[m] > 1),
        "mentions": len(mentions),
        "answered": len(first_reply) - apologies,
        "apologised": apologies,
        "unanswered": len(set(mentions) - set(first_reply)),
        "p50_ms_gateway_to_durable": quantile_ms(latencies, 0.5),
        "p99_ms_gateway_to_durable": quantile_ms(latencies, 0.99),
        "p99_ms_mention_to_reply": quantile_ms([ms / 1000 for ms in reply_ms], 0.99),
        "p99_ms_mention_to_reply_apart_from_model": quantile_ms(
            [ms / 1000 for ms in apart_ms], 0.99
        ),
        "bot_cpu_us_per_msg": round(cpu_seconds / max(len(sent), 1) * 1e6, 1),
        "peak_rss_mb": round(peak_mb, 1),
        "model_requests": model_requests,
        "model_failures_served": failures,
        "gateway_resumes": fake["resumes"],
        "gateway_identifies": fake["identifies"],
        "fake_errors": fake["errors"][:3],
    }


def stored_ids(data: Path) -> list[int]:
    """The Discord id of every message stored, in every channel, as often as stored."""
    backend = open_backend(data)
    try:
        store = EventStore(backend)
        return [
            event.message_id
            for meta in store.streams()
            for _, event in store.events(StreamId(meta.guild_id, meta.channel_id))
            if isinstance(event, MessagePosted) and not event.bot
        ]
    finally:
        backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=300.0, help="messages a second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the load lasts")
    parser.add_argument("--channels", type=int, default=2000)
    parser.add_argument("--mention-every", type=int, default=50)
    parser.add_argument("--faults", action="store_true",
                        help="model errors and time-outs and gateway drops in the middle third")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-shard-") as tmp:
        result = trio.run(run, args, Path(tmp))
    print(json.dumps(msgspec.to_builtins(result)))
    problems = result["lost"] + result["stored_twice"] + result["unanswered"]
    return 1 if problems or result["fake_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
