# `eva ask CHANNEL QUESTION`: Eva's reply path from the command line, as the bot runs it.
from __future__ import annotations

import argparse
import os
import time

import msgspec
import trio

from eva.cli.common import (
    UserError,
    add_channel_argument,
    add_data_option,
    add_json_option,
    add_settings_option,
    find_stream,
    load_settings,
    open_store,
    print_json,
)
from eva.core.costs import reply_cost
from eva.core.events import ReplyWritten
from eva.core.grounding import Grounding
from eva.core.keys import StreamId
from eva.core.recall import RecallView
from eva.core.render import visible
from eva.core.settings import MemorySettings, ModelSettings
from eva.core.summarize import OfflineSummarizer
from eva.live.inputs import Post, Recall
from eva.live.supervisor import Supervisor, open_supervisor
from eva.store.event_store import EventStore

QUESTION_ID = 1
"""The message id the question is asked under: none of Discord's is this small."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "ask",
        help="ask Eva a question in a channel, as if it were posted there",
        description=(
            "Run Eva's reply path on a question as the bot would (her prompt, tools and "
            "rounds; the monthly quota aside): through Claude with ANTHROPIC_API_KEY, through "
            "any endpoint that speaks the Messages API with --base-url, offline without "
            "either. Prints the reply, each tool call, where each detail of the reply came "
            "from (read word for word, only in summary lines, or nowhere), the usage and its "
            "cost. The reply is not recorded; the tool calls are, as the bot's are."
        ),
    )
    add_channel_argument(parser)
    parser.add_argument("question", nargs="+", help="the question, in plain words")
    parser.add_argument("--as", dest="as_name", default="someone", metavar="NAME",
                        help="who asks (default: someone)")
    parser.add_argument("--base-url", default=None,
                        help="another address for the Messages API (default: the settings')")
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from eva.cli.cmd_cost import load_model_settings

    settings = load_settings(args.settings)
    models = load_model_settings(args.settings)
    if args.base_url:
        models = msgspec.structs.replace(models, base_url=args.base_url)
    # the quota is the bot's business: a question asked here is never refused for it
    models = msgspec.structs.replace(models, replies_per_guild_month=10**9)
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not key and models.base_url:
        key = "not-needed"  # an endpoint of one's own may ask for none
    store = open_store(args.data, write=True)
    stream = find_stream(store, args.channel)
    text = " ".join(args.question).strip()
    if not text:
        raise UserError("the question is empty")
    now_ms = int(time.time() * 1000)
    question = Post(message_id=QUESTION_ID, author_id=QUESTION_ID, author_name=args.as_name,
                    at_ms=now_ms, content=text)
    answer = trio.run(ask, store, stream, question, settings, models, key or None, now_ms)
    if args.json:
        print_json(answer)
        return 1 if answer["failed"] else 0
    else:
        print(visible(str(answer["reply"])))
        for call in answer["tool_calls"]:  # type: ignore[attr-defined]
            print(f"  tool {call['name']} {json_text(call['input'])}")
        grounding = answer["grounding"]
        if isinstance(grounding, dict):
            for detail in grounding["details"]:
                print(f"  detail {detail['text']!r}: {detail['kind']}")
            print(f"  details: {grounding['read']} read, {grounding['summary']} only in "
                  f"summaries, {grounding['unsupported']} unsupported")
        usd = answer["usd"]
        spent = f"usd {usd:.6f}" if isinstance(usd, float) else (
            f"unpriced ({models.reply_model} is not in the price table)"
        )
        print(f"  {answer['how']}; {spent}")
    return 1 if answer["failed"] else 0


def json_text(value: object) -> str:
    return msgspec.json.encode(value).decode()


async def ask(
    store: EventStore, stream: StreamId, question: Post, settings: MemorySettings,
    models: ModelSettings, key: str | None, now_ms: int,
) -> dict[str, object]:
    async with open_supervisor(store, OfflineSummarizer(), settings, resume=False) as sup:
        if key is None:
            return await offline(sup, stream, question)
        from eva.model.client import make_client
        from eva.model.reply import write_reply

        client = make_client(models, key)
        try:
            outcome = await write_reply(sup, stream, question, client, models, now_ms,
                                        record=False)
        finally:
            await client.close()
    record: ReplyWritten | None = outcome.unrecorded
    price = models.prices.get(models.reply_model)
    usd: float | None = None  # unpriced: never shown as $0
    if price is not None:
        usd = 0.0 if record is None else round(reply_cost(record, price), 6)
    return {
        "reply": outcome.text,
        "tool_calls": [{"name": name, "input": msgspec.json.decode(arguments)}
                       for name, arguments in outcome.tools],
        "grounding": grounding_json(outcome.grounding),
        "usage": msgspec.to_builtins(outcome.usage),
        "usd": usd,
        "model": models.reply_model,
        "failed": outcome.failed,
        "how": "the model did not answer" if outcome.failed else (
            f"answered by {record.model if record is not None else models.reply_model}"
        ),
    }


async def offline(sup: Supervisor, stream: StreamId, question: Post) -> dict[str, object]:
    """Without a key: what the bot says offline, the messages recall finds."""
    from eva.discord.mapping import offline_reply

    view = await sup.ask(stream, Recall(query=question.content))
    hits = [] if not isinstance(view, RecallView) else [
        line for window in view.windows for line in window
    ]
    return {
        "reply": offline_reply(question.content, hits),
        "tool_calls": [],
        "grounding": None,
        "usage": None,
        "usd": 0.0,
        "model": None,
        "failed": False,
        "how": "offline: no ANTHROPIC_API_KEY and no --base-url",
    }


def grounding_json(grounding: Grounding | None) -> dict[str, object] | None:
    if grounding is None:
        return None
    value = msgspec.to_builtins(grounding)
    assert isinstance(value, dict)
    return value
