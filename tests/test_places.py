"""Where a channel's posts go: decided from the indexes found stored and the next free one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eva.core.places import Place, next_free_index, place_posts


def test_new_posts_take_the_next_indexes_and_stored_ones_keep_theirs() -> None:
    places = place_posts([10, 11, 12], [None, 4, None], next_index=7)
    assert places == [Place(7, stored=False), Place(4, stored=True), Place(8, stored=False)]


def test_a_message_met_twice_in_a_batch_is_placed_once() -> None:
    places = place_posts([10, 10, 11, 10], [None, None, None, None], next_index=0)
    assert places == [Place(0, stored=False), None, Place(1, stored=False), None]


def test_the_next_index_follows_the_channel_what_was_found_and_the_posts_in_flight() -> None:
    assert next_free_index(5, [None, None], in_flight_end=0) == 5
    assert next_free_index(5, [9, None], in_flight_end=0) == 10  # found in flight, past the rest
    assert next_free_index(5, [None], in_flight_end=8) == 8
    assert next_free_index(0, [], in_flight_end=0) == 0


@given(
    ids=st.lists(st.integers(0, 20), max_size=30),
    found=st.dictionaries(st.integers(0, 20), st.integers(0, 99)),
    start=st.integers(0, 100),
)
def test_new_posts_are_numbered_without_a_gap_in_their_order(
    ids: list[int], found: dict[int, int], start: int
) -> None:
    stored = [found.get(message_id) for message_id in ids]
    places = place_posts(ids, stored, start)
    new = [place.at for place in places if place is not None and not place.stored]
    assert new == list(range(start, start + len(new)))
    assert len(new) == len({i for i in ids if i not in found})
    for message_id, place in zip(ids, places, strict=True):
        if place is not None and place.stored:
            assert place.at == found[message_id]
    assert sum(place is not None for place in places) == len(set(ids))
