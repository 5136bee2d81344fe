# Grounding: each detail a reply states, found in what Eva read, in summaries only, or
# nowhere; and `eva ask`, which shows it, with two scripted models told apart.
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eva.cli.main import main
from eva.core.events import MessagePosted, ReplyWritten
from eva.core.grounding import fold, ground, stated_details
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.testing.fake_anthropic import JSON, FakeMessagesAPI


def kinds(reply: str, read: list[str], summary: list[str], names: tuple[str, ...] = ()) -> dict[
    str, str
]:
    return {d.text: d.kind for d in ground(reply, read, summary, names).details}


def test_times_are_matched_whatever_their_form() -> None:
    read = ["[4] 2025-03-08 09:12 Maya: board games Sat 10:00 at mine"]
    assert kinds("We meet at 10am.", read, []) == {"10am": "read"}
    assert kinds("We meet at 10:00.", read, []) == {"10:00": "read"}
    assert kinds("We meet at 11am.", read, []) == {"11am": "unsupported"}
    assert kinds("It starts at 7pm", ["doors at 19:00"], []) == {"7pm": "read"}


def test_dates_and_numbers_are_matched_in_their_usual_forms() -> None:
    read = ["[9] 2025-03-14 18:02 Dev: print run of 1200 copies at $24.50 each"]
    found = kinds("On March 14 Dev said 1,200 copies at $24.50.", read, [], ("Dev",))
    assert found == {"March 14": "read", "1,200": "read", "$24.50": "read", "Dev": "read"}
    assert kinds("That was on 14 March.", read, []) == {"14 March": "read"}
    assert kinds("It cost $25.", read, []) == {"$25": "unsupported"}


def test_names_are_matched_with_and_without_accents_and_nicknames_by_the_channel() -> None:
    read = ["[3] 2025-02-01 10:00 Zoë: see you at the Café Lumière"]
    assert kinds("Zoe will be at Cafe Lumiere.", read, []) == {
        "Zoe": "read", "Cafe": "read", "Lumiere": "read",
    }
    # a name that opens a sentence counts when it is someone in the channel
    assert kinds("Priya booked it.", read, [], ("Priya",)) == {"Priya": "unsupported"}
    assert kinds("Booked it.", read, []) == {}  # an ordinary opening word is no detail
    assert fold("Zo\u00eb\u2019s") == "zoe's"


def test_a_quote_split_over_two_messages_is_read() -> None:
    read = [
        "[12] 2025-03-14 09:58 Jonas: code name Marmalade, because it's sticky\n"
        "[13] 2025-03-14 09:59 Jonas: and everyone likes it\n"
    ]
    found = kinds('Jonas called it "because it\'s sticky and everyone likes it".', read, [])
    assert found['"because it\'s sticky and everyone likes it"'] == "read"


def test_a_detail_only_in_a_row_line_is_from_the_summary() -> None:
    summary = ["64+64 2025-05-01..2025-05-09|Kenji: the ferry leaves at 06:40 from Pier 3"]
    read = ["[200] 2025-06-01 12:00 Maya: anyone remember the ferry?"]
    found = kinds("Kenji said the ferry leaves at 06:40 from Pier 3.", read, summary, ("Kenji",))
    assert found == {"Kenji": "summary", "06:40": "summary", "Pier": "summary", "3": "summary"}
    grounding = ground("Kenji said 06:40.", read, summary, ("Kenji",))
    assert (grounding.read, grounding.summary, grounding.unsupported) == (0, 2, 0)
    assert grounding.guessed


def test_links_and_each_detail_once() -> None:
    details = stated_details("See https://example.org/plan. Again: https://example.org/plan")
    assert [d[0] for d in details].count("https://example.org/plan.") == 1
    grounding = ground("See https://example.org/plan twice: https://example.org/plan", [
        "Maya: https://example.org/plan"], [])
    assert len(grounding.details) == 1 and grounding.read == 1 and not grounding.guessed


# -- eva ask against the fake Messages API -----------------------------------------------

STREAM = StreamId(21, 22)
FACT = "the ferry leaves at 06:40 from Pier 3"


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "data"
    store = EventStore(open_backend(directory))
    texts = [f"chat {i} about the weather " + "word " * 30 for i in range(120)]
    texts[10] = f"Kenji: {FACT}, bring coffee"
    store.append(STREAM, [
        MessagePosted(at_ms=1_740_000_000_000 + i * 60_000, index=i, message_id=1000 + i,
                      author_id=7 if i == 10 else 8, author_name="Kenji" if i == 10 else "Maya",
                      content=text)
        for i, text in enumerate(texts)
    ])
    import trio

    settings = MemorySettings(compress_at_bytes=8192, tail_keep_bytes=2048,
                              row_high_bytes=8192, row_low_bytes=4096)
    trio.run(Memory(store, STREAM, OfflineSummarizer(), settings).build, 1_800_000_000_000)
    open_backend(directory).close()
    yield directory
    open_backend(directory).close()


def last_user_text(body: JSON) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return json.dumps(content)


def zooms_first(body: JSON) -> str | list[JSON]:
    """A model that opens the message before it states the detail."""
    if len(body["messages"]) == 1:
        return [{"type": "tool_use", "id": "toolu_1", "name": "zoom",
                 "input": {"address": "10+1"}}]
    return "Kenji said the ferry leaves at 06:40 from Pier 3."


def answers_at_once(body: JSON) -> str:
    """A model that answers from the row and states a detail it never read."""
    return "Kenji said the ferry leaves at 07:15 from Pier 3."


def ask_json(data: Path, model: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    os.environ["ANTHROPIC_API_KEY"] = model.key
    status = main(["ask", "21/22", "when", "does", "the", "ferry", "leave?", "--as", "Maya",
                   "--base-url", model.url, "--data", str(data), "--json"])
    assert status == 0, capsys.readouterr().err
    open_backend(data).close()
    return json.loads(capsys.readouterr().out)


def test_eva_ask_tells_a_model_that_reads_from_one_that_guesses(
    data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "replaced by each fake's own")
    with FakeMessagesAPI(answer=zooms_first).serve() as careful:
        read = ask_json(data, careful, capsys)
    with FakeMessagesAPI(answer=answers_at_once).serve() as hasty:
        guessed = ask_json(data, hasty, capsys)
    assert read["tool_calls"] == [{"name": "zoom", "input": {"address": "10+1"}}]
    assert {d["text"]: d["kind"] for d in read["grounding"]["details"]}["06:40"] == "read"
    assert read["grounding"]["unsupported"] == 0 and read["grounding"]["summary"] == 0
    assert guessed["tool_calls"] == []
    assert {d["text"]: d["kind"] for d in guessed["grounding"]["details"]}["07:15"] == (
        "unsupported"
    )
    assert read["usd"] > 0 and {"reply", "tool_calls", "grounding", "usd"} <= set(read)
    # asking records no reply: only the bot's replies count
    store = EventStore(open_backend(data))
    assert not [e for _, e in store.events(STREAM) if isinstance(e, ReplyWritten)]


def test_a_reply_model_missing_from_the_price_table_is_unpriced_never_free(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text('[models]\nreply_model = "claude-sonnet-4"\n')
    capsys.readouterr()
    assert main(["settings", "--settings", str(settings)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "claude-sonnet-4 is not in the price table" in err
    assert "[models.prices.claude-sonnet-4]" in err
    with FakeMessagesAPI(answer=answers_at_once).serve() as model:
        monkeypatch.setenv("ANTHROPIC_API_KEY", model.key)
        common = ["ask", "21/22", "when", "does", "the", "ferry", "leave?", "--base-url",
                  model.url, "--data", str(data), "--settings", str(settings)]
        assert main([*common, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["usd"] is None
        assert main(common) == 0
        out = capsys.readouterr().out
    assert "unpriced (claude-sonnet-4 is not in the price table)" in out and "usd 0" not in out
    open_backend(data).close()


def test_eva_ask_offline_quotes_what_recall_finds(
    data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    capsys.readouterr()
    assert main(["ask", "21/22", "ferry", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "Eva is offline" in out and "06:40" in out and "offline: no ANTHROPIC_API_KEY" in out


CHECK = "Before this answer is posted"


def corrects_when_asked(body: JSON) -> str | list[JSON]:
    """A model that guesses, and when asked to check, zooms to the message and corrects."""
    last = str(body["messages"][-1]["content"])
    if CHECK in last:
        return [{"type": "tool_use", "id": "toolu_9", "name": "zoom",
                 "input": {"address": "10+1"}}]
    if "tool_result" in last:
        return "Kenji said the ferry leaves at 06:40 from Pier 3."
    return "Kenji said the ferry leaves at 07:15 from Pier 3."


def test_a_guess_is_caught_before_it_is_posted_and_checked(
    data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "replaced by each fake's own")
    with FakeMessagesAPI(answer=corrects_when_asked).serve() as model:
        answer = ask_json(data, model, capsys)
        bodies = [str(r.body["messages"][-1]["content"]) for r in model.message_requests()]
    assert len(bodies) == 3 and CHECK in bodies[1] and "07:15" in bodies[1]
    assert answer["reply"] == "Kenji said the ferry leaves at 06:40 from Pier 3."
    assert answer["grounding"]["unsupported"] == 0 and answer["grounding"]["summary"] == 0
    # the guesser is given the round too, once, and what it says then is what is recorded
    with FakeMessagesAPI(answer=answers_at_once).serve() as hasty:
        guessed = ask_json(data, hasty, capsys)
        asked = [str(r.body["messages"][-1]["content"]) for r in hasty.message_requests()]
    assert len(asked) == 2 and CHECK in asked[1]
    assert guessed["grounding"]["unsupported"] >= 1
    # the careful one is never asked
    with FakeMessagesAPI(answer=zooms_first).serve() as careful:
        ask_json(data, careful, capsys)
        assert not any(CHECK in str(r.body["messages"][-1]["content"])
                       for r in careful.message_requests())
    # and a setting turns the round off
    settings = data.parent / "no-check.toml"
    settings.write_text("[models]\ncheck_guesses = false\n")
    with FakeMessagesAPI(answer=answers_at_once).serve() as hasty:
        os.environ["ANTHROPIC_API_KEY"] = hasty.key
        capsys.readouterr()
        assert main(["ask", "21/22", "ferry?", "--base-url", hasty.url, "--data", str(data),
                     "--settings", str(settings), "--json"]) == 0
        assert len(hasty.message_requests()) == 1
    open_backend(data).close()


def test_status_and_audit_show_how_replies_were_grounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time as clock

    from eva.core.events import ChannelDescribed, Usage
    from eva.core.grounding import Detail, Grounding

    now = int(clock.time() * 1000)
    month = clock.strftime("%Y-%m", clock.gmtime(now / 1000))
    data = tmp_path / "data"
    store = EventStore(open_backend(data))

    def reply(kind: str, to: int) -> ReplyWritten:
        details = (Detail(text="06:40", kind=kind),)  # type: ignore[arg-type]
        return ReplyWritten(
            at_ms=now, model="claude-haiku-5-5", usage=Usage(input_tokens=10), month=month,
            to_message_id=to,
            grounding=Grounding(details=details, read=int(kind == "read"),
                                summary=int(kind == "summary"),
                                unsupported=int(kind == "unsupported")),
        )

    store.append(STREAM, [
        ChannelDescribed(at_ms=now, guild_id=21, channel_id=22, channel_name="boats"),
        reply("read", 1), reply("summary", 2), reply("unsupported", 3), reply("read", 4),
    ])
    open_backend(data).close()
    capsys.readouterr()
    assert main(["status", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "guessed in 2 of 4 replies" in out and "#boats: guessed in 2 of 4 replies" in out
    assert main(["status", "--data", str(data), "--json"]) == 0
    (guild,) = json.loads(capsys.readouterr().out)["guilds"]
    assert (guild["guessed_replies"], guild["grounded_replies"]) == (2, 4)
    assert guild["channels"] == [
        {"channel": "#boats", "guessed_replies": 2, "grounded_replies": 4}
    ]
    assert main(["audit", "21/22", "--data", str(data)]) == 0
    audit = capsys.readouterr().out
    assert "details: 0 read, 1 only in summaries, 0 unsupported" in audit
    open_backend(data).close()
