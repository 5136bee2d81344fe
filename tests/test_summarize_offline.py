"""The offline summarizer, line validation, and the tree's choice of glue or task."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eva.core.address import Address
from eva.core.render import fits, render_message, utf8_size
from eva.core.salience import Unit, _Chosen, render, score
from eva.core.summarize import (
    OFFLINE_MODEL,
    LeafTask,
    MergeTask,
    OfflineSummarizer,
    Summarizer,
    Summary,
    Task,
    _pieces,
    offline_line,
    validate_line,
)
from eva.core.tree import glue_or_task, leaf_work, newly_ready

names = st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=20)
words = st.text(alphabet=st.characters(codec="utf-8", exclude_characters=":"), max_size=400)
utterances = st.builds(lambda name, said: f"{name}: {said}", names, words)
halves_text = st.lists(utterances, min_size=1, max_size=4).map("\n".join)
limits = st.integers(1, 600)


def long_message(name: str, words_count: int = 200) -> str:
    return render_message(name, " ".join(f"word{index}" for index in range(words_count)))


def assert_lands(line: str, limit: int) -> None:
    assert line.strip()
    assert fits(line, limit)
    assert validate_line(line, limit) == line


@given(names, words, limits)
def test_offline_leaf_fits_and_is_never_empty(name: str, said: str, limit: int) -> None:
    text = render_message(name, said)
    line = offline_line(LeafTask(address=Address(5, 1), name=name, text=text), limit)
    assert_lands(line, limit)


@given(halves_text, halves_text, limits)
def test_offline_merge_fits_and_is_never_empty(left: str, right: str, limit: int) -> None:
    line = offline_line(MergeTask(address=Address(0, 2), left_text=left, right_text=right), limit)
    assert_lands(line, limit)


@given(st.text(), st.text(), limits)
def test_offline_merge_of_any_text_lands(left: str, right: str, limit: int) -> None:
    line = offline_line(MergeTask(address=Address(0, 2), left_text=left, right_text=right), limit)
    assert_lands(line, limit)


@given(halves_text, halves_text)
def test_offline_is_deterministic(left: str, right: str) -> None:
    task = MergeTask(address=Address(4, 4), left_text=left, right_text=right)
    assert offline_line(task) == offline_line(task)


@given(st.lists(st.tuples(names, words), min_size=2, max_size=8))
def test_offline_merge_keeps_every_speaker_while_all_fit(said: list[tuple[str, str]]) -> None:
    utterances_text = [f"{name}: {text}" for name, text in said]
    middle = len(utterances_text) // 2
    task = MergeTask(
        address=Address(0, 8),
        left_text="\n".join(utterances_text[:middle]),
        right_text="\n".join(utterances_text[middle:]),
    )
    line = offline_line(task)
    assert fits(line, 512)
    if fits(" / ".join(utterances_text), 512):
        for name, _ in said:
            assert f"{name}:" in line


def test_offline_leaf_keeps_the_name_and_the_start() -> None:
    text = long_message("Ann")
    line = offline_line(LeafTask(address=Address(7, 1), name="Ann", text=text))
    assert line.startswith("Ann: word0 word1 word2")
    assert line.endswith("…")
    assert fits(line, 512)
    assert len(line.encode()) > 400


def test_offline_merge_keeps_both_halves_in_order() -> None:
    task = MergeTask(
        address=Address(0, 2),
        left_text=long_message("Ann"),
        right_text=long_message("Bob"),
    )
    line = offline_line(task)
    assert line.startswith("Ann: word0 word1")
    assert " / Bob: word0 word1" in line
    assert fits(line, 512)


def test_offline_merge_gives_a_short_half_all_it_needs() -> None:
    task = MergeTask(
        address=Address(0, 2), left_text="Ann: ok, see you", right_text=long_message("Bob")
    )
    line = offline_line(task)
    assert line.startswith("Ann: ok, see you / Bob: word0")
    assert len(line.encode()) > 480


def test_offline_merge_with_many_speakers_keeps_whole_clauses_credited() -> None:
    left = "\n".join(f"P{index}: " + "blah " * 30 for index in range(0, 30, 2))
    right = "\n".join(f"P{index}: " + "blah " * 30 for index in range(1, 30, 2))
    line = offline_line(MergeTask(address=Address(0, 64), left_text=left, right_text=right))
    assert fits(line, 512)
    assert line.count("…") <= 1  # what is kept is whole, but for one clause filling the rest
    kept = re.findall(r"P(\d+): ", line)
    assert len(kept) >= 3 and kept == sorted(kept, key=int)  # credited, in time order


def test_offline_merge_keeps_the_facts_and_drops_the_filler() -> None:
    left = "\n".join([
        "Maya: good morning",
        "Jonas: Booked! A red cabin in Reine, 6 beds, 2,940 NOK a night. Ferry on June 14 "
        "at 15:30. It was a long evening of searching, honestly, and my laptop nearly died "
        "twice while I was comparing every single cabin on the whole island",
        "Zoë: haha",
    ])
    right = "\n".join([
        "Dev: I'll rent the car in Bodø, a 7-seater, pickup June 14 at noon. Also I think "
        "I finally understand why everyone likes that show, it is just very relaxing to "
        "watch people bake bread in a quiet kitchen somewhere far away from all of us",
        "Biscuit: Weekly reminder: whoever finishes the milk buys the milk",
        "Biscuit: Weekly reminder: whoever finishes the milk buys the milk",
    ])
    line = offline_line(MergeTask(address=Address(0, 8), left_text=left, right_text=right))
    assert fits(line, 512)
    for fact in ("2,940 NOK", "15:30", "Bodø", "7-seater"):
        assert fact in line, fact
    assert "good morning" not in line and "haha" not in line
    assert line.count("Weekly reminder") <= 1 and line.count("…") <= 1  # at most one cut
    assert line.index("Jonas:") < line.index("Dev:")


def test_offline_merge_ranks_hashes_code_logs_and_mention_lists_below_what_people_said(
) -> None:
    noise = [
        "Wes: SHA-256: 586fe0766ae138d666331461ae2a7db14fd917c49889f52263dfd5731d305128",
        "Kai: ```2018-09-08 00:36:10 UpdateTip: new best=095a221ae5a4434180a1b9eff784a52f52 "
        "height=1000027 log2_work=47.726822 tx=2837427 date=2018-09-08 00:36:05```",
        "Lu: send it to RJYqnvEhmBknNere9Mu8n3TGLez2ZPPykb or RBErV2jT66Ro87GBWbvVvX26GwmYyL7WGH",
        "Bot: " + " ".join(f"@Person{n} @Member{n}" for n in range(30)),
        "Mo: 10 12 14 16 18 20 22 24 26 28 30 32 34 36 38 40 42 44 46 48 50 52 54 56 58",
    ]
    said = [
        "Ann: the meetup is in Neuchatel on June 21, 2018",
        "Bo: my miner does 1/5 of the hashpower and costs $3k",
        "Cy: Huobi lists Komodo on February 28 at 14:30",
        "Dee: we reached 5,000 members",
    ]
    for _ in range(3):  # the noise is many times what fits, said or not
        noise += noise[:5]
    line = offline_line(MergeTask(
        address=Address(0, 64), left_text="\n".join(noise), right_text="\n".join(said)
    ))
    assert fits(line, 512)
    for fact in ("Neuchatel", "$3k", "14:30", "5,000"):
        assert fact in line, (fact, line)
    assert "@Person29" not in line
    worst_said = min(score(text.split(": ", 1)[1]) for text in said)
    for text in noise[:5]:
        assert score(text.split(": ", 1)[1]) < worst_said, text


@pytest.mark.parametrize(
    ("reply", "accepted"),
    [
        ("", None),
        ("   \n\t", None),
        ("x" * 513, None),
        ("x" * 512, "x" * 512),
        ("  Ann: hi \n", "Ann: hi"),
        ("é" * 257, None),
    ],
)
def test_validate_line(reply: str, accepted: str | None) -> None:
    assert validate_line(reply, 512) == accepted


async def test_offline_summarizer_satisfies_the_protocol() -> None:
    summarizer: Summarizer = OfflineSummarizer(limit=100)
    tasks: list[Task] = [
        LeafTask(address=Address(3, 1), name="Ann", text=long_message("Ann")),
        MergeTask(address=Address(0, 2), left_text="Ann: a", right_text="Bob: b"),
    ]
    summaries = await summarizer.summarize(tasks)
    assert summaries == [
        Summary(address=Address(3, 1), text=offline_line(tasks[0], 100), model=OFFLINE_MODEL),
        Summary(address=Address(0, 2), text="Ann: a / Bob: b", model=OFFLINE_MODEL),
    ]


def test_leaf_work_is_verbatim_when_it_fits() -> None:
    assert leaf_work(4, "Ann", "Ann: hi") == "Ann: hi"
    assert leaf_work(4, "Ann", "Ann: " + "x" * 507) == "Ann: " + "x" * 507
    long = "Ann: " + "x" * 508
    assert leaf_work(4, "Ann", long) == LeafTask(address=Address(4, 1), name="Ann", text=long)


def test_glue_or_task() -> None:
    assert glue_or_task(Address(0, 2), "Ann: hi", "Bob: yo") == "Ann: hi\nBob: yo"
    left, right = "a" * 255, "b" * 256
    assert glue_or_task(Address(0, 2), left, right) == f"{left}\n{right}"
    assert glue_or_task(Address(0, 2), left, right + "b") == MergeTask(
        address=Address(0, 2), left_text=left, right_text=right + "b"
    )
    assert glue_or_task(Address(4, 4), "", "x" * 512) == "x" * 512
    with pytest.raises(ValueError, match="no halves"):
        glue_or_task(Address(3, 1), "a", "b")


def test_newly_ready_needs_the_sibling_and_all_leaves() -> None:
    lines = {Address(0, 1), Address(1, 1), Address(2, 1), Address(0, 2)}

    def has_line(address: Address) -> bool:
        return address in lines

    assert newly_ready(Address(1, 1), has_line, leaves=3) == Address(0, 2)
    assert newly_ready(Address(0, 1), has_line, leaves=3) == Address(0, 2)
    assert newly_ready(Address(2, 1), has_line, leaves=3) is None  # 3+1 missing
    assert newly_ready(Address(0, 2), has_line, leaves=3) is None  # 2+2 missing
    lines.add(Address(3, 1))
    assert newly_ready(Address(3, 1), has_line, leaves=4) == Address(2, 2)
    assert newly_ready(Address(3, 1), has_line, leaves=3) is None


_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]| / ")
_NAMED = re.compile(r"([^:\s][^:\n]{0,79}?): (.*)", re.DOTALL)


def pieces_by_pattern(text: str) -> list[tuple[str | None, str]]:
    """The rule of `_pieces` as two patterns: split at breaks and ` / `, then `Name: text`."""
    found: list[tuple[str | None, str]] = []
    for part in _BREAKS.split(text):
        part = part.strip()
        if part:
            named = _NAMED.fullmatch(part)
            found.append(
                (None, part) if named is None
                else (named.group(1).strip(), named.group(2).strip())
            )
    return found


@given(
    st.lists(
        st.sampled_from(["Ann", ": ", ":", " / ", "/", "\n", "\r\n", "\r", "\u2028", " ", "\t",
                         "x" * 79, "é", "http://a", "B o b", "\x85", "😀"]),
        max_size=30,
    )
)
def test_pieces_follow_their_rule(parts: list[str]) -> None:
    text = "".join(parts)
    assert [(p.name, p.body) for p in _pieces(text)] == pieces_by_pattern(text)


@pytest.mark.parametrize(
    "text",
    ["a" * 80 + ": said", "a" * 81 + ": said", ": said", " Ann: hi", "Ann:hi", "Ann : hi",
     "a:b: c", "Ann: hi / Bob: yo\r\nCy: x", "Ann:  \u2028Bob: x", "Ann: a: b"],
)
def test_pieces_name_their_speakers_by_the_rule(text: str) -> None:
    assert [(p.name, p.body) for p in _pieces(text)] == pieces_by_pattern(text)


@given(
    st.lists(
        st.tuples(st.sampled_from([None, "Ann", "Bo", "Zoë"]), st.text(max_size=30)),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
    st.sampled_from([" / ", "\n", " · "]),
)
def test_the_bytes_of_kept_clauses_are_counted_as_rendered(
    said: list[tuple[str | None, str]], rng: random.Random, separator: str
) -> None:
    units = [Unit(order, speaker, text, 1.0) for order, (speaker, text) in enumerate(said)]
    rng.shuffle(units)
    chosen = _Chosen(separator)
    for unit in units:
        expected = utf8_size(render([*chosen.units, unit], separator))
        assert chosen.size_with(unit, utf8_size(unit.text)) == expected
        chosen.add(unit, utf8_size(unit.text))
        assert chosen.size == expected
