"""What a server-month costs: the planner's pure parts against hand counts, and `eva plan`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from eva.cli.main import main
from eva.core.block import ShownMessage, memory_row, message_line
from eva.core.events import AnyEvent, LineWritten, MessagePosted, RowPublished
from eva.core.prices import Price
from eva.core.summarize import OFFLINE_MODEL
from eva.demo.friends import friends_export
from eva.plan.server_month import (
    MONTH_DAYS,
    PromptTexts,
    ReplyAssumptions,
    Variant,
    about_message,
    bill_variant,
    place_replies,
    read_timeline,
    zoom_depth,
)
from eva.plan.tree_cost import bill_tree

BASE_MS = 1_700_000_000_000
DAY_MS = 86_400_000
# One token a byte, so that token counts are byte counts a person can add up.
PRICE = Price(
    input=1.0, output=2.0, cache_write_5m=1.25, cache_write_1h=2.0, cache_read=0.1,
    min_cache_tokens=0, bytes_per_token=1.0,
)
TEXTS = PromptTexts(
    system="S" * 540, tools="T" * 270, tools_overhead_tokens=0, empty_tail="(none)",
    budget_tokens=60_000,
)


def post(index: int, at_ms: int, text: str) -> MessagePosted:
    return MessagePosted(at_ms=at_ms, index=index, message_id=100 + index, author_id=1,
                         author_name="Ann", content=text)


def line_of(message: MessagePosted) -> str:
    shown = ShownMessage(index=message.index, at_ms=message.at_ms,
                         author_name=message.author_name, content=message.content)
    return message_line(shown) + "\n"


def chat() -> list[MessagePosted]:
    return [post(i, BASE_MS + i * 60_000, f"message number {i}") for i in range(4)]


def test_two_replies_priced_by_hand() -> None:
    posts = chat()
    questions = {1: "Q" * 30, 3: "R" * 40}
    timeline = read_timeline(posts, questions, TEXTS, 1 << 20, 1.0, tz_utc())
    assumed = ReplyAssumptions(tool_rounds=0, answer_bytes=10, thinking_tokens=0)
    bill = bill_variant(timeline, Variant("m", "long"), PRICE, TEXTS, assumed)
    first, second = bill.replies
    row = len(memory_row([]))
    chunk_1 = len(line_of(posts[0]) + line_of(posts[1]))
    chunk_2 = len(line_of(posts[2]) + line_of(posts[3]))
    # the first writes tools, system, row and tail for an hour; the question is plain input
    assert (first.read, first.write, first.uncached) == (0, 270 + 540 + row + chunk_1, 30)
    assert first.usd == pytest.approx(((270 + 540 + row + chunk_1) * 2.0 + 30 + 10 * 2.0) / 1e6)
    assert first.cold
    # two minutes on, everything but the new chunk is read back
    assert (second.read, second.write, second.uncached) == (270 + 540 + row + chunk_1,
                                                           chunk_2, 40)
    assert second.usd == pytest.approx(
        ((270 + 540 + row + chunk_1) * 0.1 + chunk_2 * 2.0 + 40 + 10 * 2.0) / 1e6
    )
    assert not second.cold


def test_a_tool_round_reads_the_prompt_again() -> None:
    posts = chat()
    timeline = read_timeline(posts, {1: "Q" * 30}, TEXTS, 1 << 20, 1.0, tz_utc())
    assumed = ReplyAssumptions(tool_rounds=1, tool_result_bytes=100,
                               tool_call_output_tokens=7, answer_bytes=10,
                               thinking_tokens=0)
    [reply] = bill_variant(timeline, Variant("m", "long"), PRICE, TEXTS, assumed).replies
    prefix = 270 + 540 + len(memory_row([])) + len(line_of(posts[0]) + line_of(posts[1]))
    # round one writes the prefix; round two reads it, its question, call and result plain
    assert (reply.read, reply.write, reply.uncached) == (prefix, prefix, 30 + 30 + 7 + 100)
    assert reply.requests == 2 and reply.output == 7 + 10
    assert reply.usd == pytest.approx(
        (prefix * 2.0 + 30 + 7 * 2.0 + prefix * 0.1 + (30 + 7 + 100) + 10 * 2.0) / 1e6
    )


def test_without_cache_marks_every_token_is_plain_input() -> None:
    posts = chat()
    timeline = read_timeline(posts, {1: "Q" * 30, 3: "R" * 40}, TEXTS, 1 << 20, 1.0, tz_utc())
    assumed = ReplyAssumptions(tool_rounds=0, answer_bytes=10, thinking_tokens=0)
    bill = bill_variant(timeline, Variant("m", "none"), PRICE, TEXTS, assumed)
    for reply in bill.replies:
        assert reply.read == reply.write == 0
        assert reply.usd == pytest.approx((reply.uncached + 10 * 2.0) / 1e6)


def test_the_tree_is_priced_task_by_task_through_batches() -> None:
    message = post(0, BASE_MS, "x" * 100)
    leaf = LineWritten(at_ms=BASE_MS, start=0, size=1, text="L" * 50, first_ms=BASE_MS,
                       last_ms=BASE_MS, how="model", model=OFFLINE_MODEL)
    glued = LineWritten(at_ms=BASE_MS, start=1, size=1, text="G" * 20, first_ms=BASE_MS,
                        last_ms=BASE_MS, how="verbatim")
    merge = LineWritten(at_ms=BASE_MS, start=0, size=2, text="M" * 40, first_ms=BASE_MS,
                        last_ms=BASE_MS, how="model", model=OFFLINE_MODEL)
    log: list[AnyEvent] = [message, leaf, glued, merge]
    tree = bill_tree(log, PRICE, instructions_tokens=500, tasks_per_request=8, batch=True,
                     task_frame_tokens=40)
    assert (tree.model_tasks, tree.requests, tree.free_lines) == (2, 1, 1)
    # leaf: "Ann: " + 100 bytes in, 50 out; merge: 50 + 20 in, 40 out; frames 40 in, 10 out
    inputs = (5 + 100 + 40) + (50 + 20 + 40)
    outputs = (50 + 10) + (40 + 10)
    assert tree.usd == pytest.approx((inputs * 1.0 + outputs * 2.0 + 500 * 1.25) / 1e6 / 2)


def test_replies_fall_where_people_talk_and_the_seed_decides_which() -> None:
    busy = [post(i, BASE_MS + i * 60_000, "hi") for i in range(900)]  # one busy day
    quiet = [post(900 + i, BASE_MS + (1 + i) * 2 * DAY_MS, "hi") for i in range(100)]
    posts = busy + quiet  # 200 days: about 6.6 months
    months = (quiet[-1].at_ms - BASE_MS) / DAY_MS / MONTH_DAYS
    chosen = place_replies(posts, 60, seed=1)
    assert len(chosen) == round(60 * months)
    assert chosen == place_replies(posts, 60, seed=1)
    assert chosen != place_replies(posts, 60, seed=2)
    in_busy = sum(index < 900 for index in chosen)
    assert 0.8 < in_busy / len(chosen) < 0.97  # 90% of the messages, so about 90% of replies
    assert place_replies(posts, 10_000, seed=1) == [p.index for p in posts]  # capped
    assert place_replies(posts, 60, seed=1, only=[3, 5, 7]) == [3, 5, 7]


def tz_utc() -> Any:
    from datetime import UTC

    return UTC


# -- eva plan ---------------------------------------------------------------------------

SMALL_MEMORY = (
    "[memory]\ncompress_at_bytes = 8192\ntail_keep_bytes = 2048\n"
    "row_high_bytes = 8192\nrow_low_bytes = 4096\noverflow_tail_bytes = 16384\n"
)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "friends.json"
    path.write_bytes(friends_export(1200))
    return path


def run_plan(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["plan", *args, "--json"]) == 0
    value = json.loads(capsys.readouterr().out)
    assert isinstance(value, dict)
    return value


def test_eva_plan_gives_the_same_bill_every_run(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "small.toml"
    settings.write_text(SMALL_MEMORY)
    chart = tmp_path / "days.svg"
    args = [str(export), "--settings", str(settings), "--replies-per-month", "40"]
    first = run_plan([*args, "--chart", str(chart), "--rows", "1,0.5"], capsys)
    second = run_plan([*args, "--rows", "0.5"], capsys)
    first.pop("seconds")
    second.pop("seconds")
    assert first == second
    # the row compared at its own size and at half: a smaller row is further from the
    # messages, and zooming down costs more than one round; recall first lies between
    default, half = first["rows"]
    assert (default["row_low_bytes"], default["row_high_bytes"]) == (4096, 8192)
    assert (half["row_low_bytes"], half["row_high_bytes"]) == (2048, 4096)
    assert half["zoom_depth"] > default["zoom_depth"] > 0
    for row in (default, half):
        usd = row["usd_per_month"]
        assert usd["zooming"] > usd["recall first"] > usd["assumed"] > 0
    assert default["usd_per_month"]["assumed"] == pytest.approx(first["usd_per_month"])
    assert first["usd_per_month_zooming"] == default["usd_per_month"]["zooming"]
    for key in ("usd_per_month", "tree_usd_per_month", "replies_usd_per_month",
                "replies_per_month", "usd_per_reply_cold", "usd_per_reply_warm",
                "cache_read_share", "reply_model", "price_table_checked"):
        assert key in first
    assert first["price_table_checked"] == "2026-12-06"
    assert first["replies_per_month"] == pytest.approx(40, abs=1)
    assert first["usd_per_month"] == pytest.approx(
        first["replies_usd_per_month"] + first["tree_usd_per_month"]
        + first["keep_warm_usd_per_month"], abs=1e-5
    )
    assert first["usd_per_reply_cold"] > first["usd_per_reply_warm"] > 0
    names = {v["name"] for v in first["variants"]}
    assert {"claude-haiku-5-5 long", "claude-sonnet-5-5 long",
            "claude-haiku-5-5 5m, tail in one block"} <= names
    sonnet = next(v for v in first["variants"] if v["name"] == "claude-sonnet-5-5 long")
    haiku = next(v for v in first["variants"] if v["name"] == "claude-haiku-5-5 long")
    assert sonnet["replies_usd_per_month"] > 10 * haiku["replies_usd_per_month"]
    assert not list(tmp_path.glob("data*")), "the plan wrote outside its temporary directory"
    svg = chart.read_text()
    assert svg.startswith("<svg") and "dollars a day" in svg and svg.count("<rect") > 10
    # another seed puts the replies elsewhere
    other = run_plan([*args, "--seed", "2"], capsys)
    assert other["usd_per_month"] != first["usd_per_month"]


def test_eva_plan_prints_a_table_and_reads_a_data_directory(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data)]) == 0
    settings = tmp_path / "small.toml"
    settings.write_text(SMALL_MEMORY)
    capsys.readouterr()
    assert main(["plan", "--data", str(data), "--settings", str(settings),
                 "--replies-per-month", "30"]) == 0
    out = capsys.readouterr().out
    assert "$/month" in out and "margin" in out and "the seed's figure" in out
    assert "*claude-haiku-5-5 long" in out
    assert "zooming down to it" in out and "*4-8 KiB" in out and " 2-4 KiB" in out
    from_export = run_plan([str(export), "--settings", str(settings),
                            "--replies-per-month", "30", "--rows", "1"], capsys)
    from_data = run_plan(["--data", str(data), "--settings", str(settings),
                          "--replies-per-month", "30", "--rows", "1"], capsys)
    assert from_data["usd_per_month"] == pytest.approx(from_export["usd_per_month"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give an EXPORT file or --data DIR"),
        (["missing.json"], "no such file"),
        (["{export}", "--replies-per-month", "-3"], "must not be negative"),
        (["{export}", "--tool-rounds", "99"], "between 0 and 16"),
        (["{export}", "--recall-finds", "nan"], "--recall-finds must be between 0 and 1"),
        (["{export}", "--rows", "1,half"], "--rows takes shares such as"),
        (["{export}", "--rows", "0"], "each share must be above 0"),
        (["--data", "{tmp}/nowhere"], "no Eva data directory"),
    ],
)
def test_eva_plan_refuses_bad_input_plainly(
    args: list[str], message: str, export: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    given = [a.format(export=export, tmp=tmp_path) for a in args]
    capsys.readouterr()
    assert main(["plan", *given]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_zoom_depth_weighs_each_line_by_the_messages_it_covers() -> None:
    # 8 messages three zooms down, 4 two down, 2 one down, 2 leaves in the row itself
    assert zoom_depth([8, 4, 2, 1, 1]) == pytest.approx((8 * 3 + 4 * 2 + 2 * 1) / 16)
    assert zoom_depth([]) == 0.0


def test_a_reply_is_about_one_message_of_the_row_each_as_likely() -> None:
    starts, sizes = [0, 8, 12, 14, 15], [8, 4, 2, 1, 1]
    drawn = [about_message(starts, sizes, seed=1, question=q) for q in range(4000)]
    assert set(drawn) == {3, 2, 1, 0}
    # half the messages sit three zooms down, a quarter two, and so on
    assert drawn.count(3) / len(drawn) == pytest.approx(0.5, abs=0.03)
    assert drawn.count(2) / len(drawn) == pytest.approx(0.25, abs=0.03)
    assert sum(drawn) / len(drawn) == pytest.approx(zoom_depth(sizes), abs=0.05)
    assert drawn == [about_message(starts, sizes, seed=1, question=q) for q in range(4000)]
    assert drawn != [about_message(starts, sizes, seed=2, question=q) for q in range(4000)]
    assert about_message([], [], seed=1, question=5) == 0


def test_a_replys_rounds_counted_three_ways() -> None:
    assumed = ReplyAssumptions(tool_rounds=1, recall_finds=0.75)
    assert [assumed.rounds_for(n, 6, "assumed") for n in range(4)] == [1, 1, 1, 1]
    # one round a zoom, never fewer than the assumed round
    assert [assumed.rounds_for(n, zooms, "zooming") for n, zooms in enumerate([6, 3, 0, 1])] \
        == [6, 3, 1, 1]
    # recall first: three in four find it in their round; one in four zooms after it
    assert [assumed.rounds_for(n, 6, "recall first") for n in range(8)] == [7, 1, 1, 1] * 2


def test_zooming_replies_pay_for_each_round() -> None:
    posts = chat()
    row = [
        LineWritten(at_ms=BASE_MS + 150_000, start=0, size=2, text="two", first_ms=BASE_MS,
                    last_ms=BASE_MS + 60_000, how="model", model=OFFLINE_MODEL),
    ]
    published = RowPublished(at_ms=BASE_MS + 150_000, entries=((0, 2),), frontier=2,
                             row_bytes=20)
    log: list[AnyEvent] = [*posts[:3], *row, published, posts[3]]
    timeline = read_timeline(log, {3: "Q" * 30}, TEXTS, 1 << 20, 1.0, tz_utc())
    assert [turn.zooms for turn in timeline.turns] == [1] and timeline.zooms == [1]
    assumed = ReplyAssumptions(tool_rounds=0, answer_bytes=10, thinking_tokens=0,
                               check_share=0.0)
    variant = Variant("m", "long")
    [fixed] = bill_variant(timeline, variant, PRICE, TEXTS, assumed).replies
    [zooming] = bill_variant(timeline, variant, PRICE, TEXTS, assumed, "zooming").replies
    assert (fixed.requests, zooming.requests) == (1, 2)
    assert zooming.usd > fixed.usd


def test_a_model_missing_from_the_price_table_is_shown_unpriced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "short.json"
    export.write_bytes(friends_export(300))
    settings = tmp_path / "mystery.toml"
    settings.write_text(SMALL_MEMORY + '[models]\nreply_model = "claude-mystery-9"\n')
    result = run_plan([str(export), "--settings", str(settings), "--replies-per-month", "20",
                       "--rows", "1"], capsys)
    assert result["reply_model"] == "claude-mystery-9"
    assert result["usd_per_month"] is None and result["usd_per_reply_cold"] is None
    assert result["margin"] is None
    assert result["tree_usd_per_month"] is not None  # the line model is priced
    assert main(["plan", str(export), "--settings", str(settings),
                 "--replies-per-month", "20", "--rows", "1"]) == 0
    assert "unpriced" in capsys.readouterr().out


@pytest.mark.parametrize("rate", ["nan", "inf", "1e308", "1e-300", "0.0001", "0", "-5"])
def test_a_rate_no_channel_can_have_is_refused_in_one_line(
    rate: str, export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["plan", str(export), "--messages-per-month", rate]) == 1
    err = capsys.readouterr().err
    assert "--messages-per-month must be from 1 to" in err and "Traceback" not in err


def test_a_chart_that_cannot_be_written_is_refused_before_the_play(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    chart = tmp_path / "no-such-folder" / "days.svg"
    assert main(["plan", str(export), "--chart", str(chart)]) == 1
    err = capsys.readouterr().err
    assert f"cannot write the chart to {chart}" in err and "playing" not in err


def test_mentions_only_in_a_channel_that_never_names_eva_is_refused(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(export.read_bytes())
    for message in data["messages"]:
        message["content"] = re.sub(r"(?i)\beva\b", "Anna", message["content"])
    quiet = tmp_path / "never.json"
    quiet.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["plan", str(quiet), "--mentions-only"]) == 1
    assert "no message of the channel names Eva" in capsys.readouterr().err
