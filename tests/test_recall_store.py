# Recall through a real store: the question read, searched and shown as `eva recall` does.
from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

from eva.cli.cmd_import import import_bytes
from eva.cli.common import open_store
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.memory.view import RECALL_CAP_BYTES, recall
from tests.script_module import load_script

STREAM = StreamId(111, 222)
PEOPLE = {"ann": ("500", "Ann"), "bo": ("501", "Bo"), "cy": ("502", "Cy")}


def post(
    number: int, who: str, when: str, text: str, reply_to: int | None = None
) -> dict[str, Any]:
    """Message `number` by `who` at `when` (YYYY-MM-DDTHH:MM)."""
    author_id, name = PEOPLE[who]
    message: dict[str, Any] = {
        "id": str(900_000 + number),
        "type": "Reply" if reply_to is not None else "Default",
        "timestamp": f"{when}:00.000+00:00",
        "timestampEdited": None,
        "content": text,
        "author": {"id": author_id, "name": name.lower(), "nickname": name, "isBot": False},
        "attachments": [],
    }
    if reply_to is not None:
        message["reference"] = {"messageId": str(900_000 + reply_to)}
    return message


def store_of(tmp_path: Path, messages: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    export = {
        "guild": {"id": str(STREAM.guild_id), "name": "Guild"},
        "channel": {"id": str(STREAM.channel_id), "type": "GuildTextChat", "name": "general"},
        "messages": messages,
    }
    data = tmp_path / "data"
    import_bytes(data, json.dumps(export).encode(), Path("export.json"), quiet=True)
    return open_store(data)


def shown(view) -> list[int]:  # type: ignore[no-untyped-def]
    return [line.index for window in view.windows for line in window]


def hits(view) -> list[int]:  # type: ignore[no-untyped-def]
    return [line.index for window in view.windows for line in window if line.hit]


def test_a_month_in_the_question_keeps_to_it_and_falls_back_when_empty(tmp_path: Path) -> None:
    messages = [
        post(0, "ann", "2024-02-10T10:00", "the boat leaks again"),
        post(1, "bo", "2024-03-12T10:00", "new boat paint ordered"),
        post(2, "cy", "2024-04-02T10:00", "boat trip was great"),
        post(3, "cy", "2024-05-02T10:00", "nothing to do with it"),
    ]
    store = store_of(tmp_path, messages)
    settings = MemorySettings()
    assert hits(recall(store, STREAM, "what about the boat in March 2024?", settings)) == [1]
    # no boat talk in June: the whole chat is searched rather than nothing shown
    assert sorted(hits(recall(store, STREAM, "the boat in June 2024", settings))) == [0, 1, 2]


def test_a_time_with_few_matching_messages_shows_its_longest_ones_too(tmp_path: Path) -> None:
    messages = [
        post(0, "ann", "2024-03-01T10:00", "we should do a trip to the lakes in june, cabins"),
        post(1, "bo", "2024-03-01T10:05", "ok"),
        post(2, "cy", "2024-03-02T10:00", "priced cabins: 640 euros each with car and flights"),
        post(3, "bo", "2024-03-02T11:00", "idea: bring the board game"),
        post(4, "ann", "2024-04-20T10:00", "another idea for a long weekend, far later"),
    ]
    store = store_of(tmp_path, messages)
    view = recall(store, STREAM, "what idea came up in early March 2024?", MemorySettings())
    assert hits(view) == [3]  # the one that says "idea" then
    assert set(shown(view)) >= {0, 2}  # and the long messages of the span with it
    assert 4 not in shown(view)


def test_a_named_persons_own_words_come_before_pings_of_them(tmp_path: Path) -> None:
    messages = [
        post(0, "ann", "2024-02-10T10:00", "the ferry leaves at noon from pier 4"),
        *(post(i, "bo", f"2024-02-{10 + i}T11:00", f"@Ann ferry? {i}") for i in range(1, 6)),
        *(post(i, "cy", f"2024-03-{i:02d}T11:00", f"lunch plans {i}") for i in range(6, 20)),
    ]
    store = store_of(tmp_path, messages)
    view = recall(store, STREAM, "when did Ann say the ferry leaves?", MemorySettings())
    assert hits(view)[0] == 0


def test_word_forms_and_replies_far_back(tmp_path: Path) -> None:
    messages = [
        post(0, "ann", "2024-02-10T10:00", "who takes us to the airport on friday?"),
        *(post(i, "cy", f"2024-02-10T10:{i:02d}", f"unrelated {i}") for i in range(1, 20)),
        post(20, "bo", "2024-02-10T10:30", "I can drive, happy to", reply_to=0),
    ]
    store = store_of(tmp_path, messages)
    view = recall(store, STREAM, "who is driving us?", MemorySettings())
    assert hits(view) == [20]  # "driving" finds "drive"
    assert shown(view) == [0, 19, 20]  # and the message it answers, far back


def test_the_evaluation_runs_on_the_demo_chat_and_beats_its_baseline() -> None:
    evaluation = load_script("eval_recall")
    figures = evaluation.main(["--chat", "demo"])
    assert figures["eva"]["questions"] == figures["bm25"]["questions"] >= 50
    assert figures["eva"]["bytes_mean"] <= RECALL_CAP_BYTES
    assert figures["eva"]["found"] > figures["bm25"]["found"]


def test_a_person_and_days_given_keep_the_search_to_them(tmp_path: Path) -> None:
    messages = [
        *(post(i, "bo", f"2024-02-{i + 1:02d}T10:00", f"ferry ferry news {i}") for i in range(9)),
        post(9, "cy", "2024-02-20T10:00", "a long day, and the ferry was late again"),
    ]
    store = store_of(tmp_path, messages)
    settings = MemorySettings()
    assert hits(recall(store, STREAM, "ferry", settings, 400)) != [9]  # Bo's come first
    assert hits(recall(store, STREAM, "ferry", settings, 400, person="@Cy")) == [9]
    assert hits(recall(store, STREAM, "ferry", settings, person="Nobody")) == []
    days = recall(store, STREAM, "ferry", settings, after=date(2024, 2, 3), before=date(2024, 2, 5))
    assert sorted(hits(days)) == [2, 3]
    assert recall(store, STREAM, "ferry", settings, after=date(2025, 1, 1)).windows == ()


def test_a_question_about_a_person_favours_what_they_say_of_themselves(tmp_path: Path) -> None:
    said = [
        "the printer on the third floor jams whenever it rains",
        "the bus timetable changed again, check it on monday",
        "i used to run a bakery before i moved here",
        "lunch menu has soup, bread and two kinds of pie today",
    ]
    messages = [
        post(2 * day + turn, *message)
        for day, text in enumerate(said)
        for turn, message in enumerate(
            [
                ("ann", f"2024-02-{day + 1:02d}T10:00", text),
                ("bo", f"2024-02-{day + 1:02d}T11:00", "ok"),
            ]
        )
    ]
    store = store_of(tmp_path, messages)
    view = recall(store, STREAM, "what is Ann's background?", MemorySettings())
    assert hits(view)[0] == 4  # her words about herself, before her longer ones
    assert sorted(hits(view)) == [0, 2, 4, 6]


def test_a_word_finds_its_family_not_only_its_stem(tmp_path: Path) -> None:
    messages = [
        post(0, "ann", "2024-02-01T10:00", "I do not snore, I breathe with conviction"),
        post(1, "bo", "2024-02-01T10:05", "we all agree on the cabin"),
        post(2, "cy", "2024-02-01T10:09", "the card game is in the car"),
        *(post(i, "cy", f"2024-02-{i:02d}T11:00", f"filler words {i}") for i in range(3, 20)),
    ]
    store = store_of(tmp_path, messages)
    settings = MemorySettings()
    assert hits(recall(store, STREAM, "who is the snorer?", settings)) == [0]
    assert hits(recall(store, STREAM, "was there an agreement?", settings)) == [1]
    assert hits(recall(store, STREAM, "cards", settings)) == [2]  # "card", but not "car"
