"""Numbered processes and their shards: every shard owned once, any other ordinal refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eva.core.shard_groups import ShardGroupError, groups, ordinal_of, shard_group


def test_ordinal_o_runs_k_shards_from_o_times_k() -> None:
    assert shard_group(0, 2, 6) == [0, 1]
    assert shard_group(2, 2, 6) == [4, 5]
    assert shard_group(3, 1, 4) == [3]
    assert groups(6, 2) == 3


def test_the_last_group_is_cut_at_the_shard_count() -> None:
    assert groups(5, 2) == 3
    assert shard_group(2, 2, 5) == [4]


def test_an_ordinal_past_the_shard_count_is_refused_with_what_would_fit() -> None:
    with pytest.raises(ShardGroupError, match=r"only 4 shard\(s\).*need 2 process\(es\), "
                       r"ordinals 0\.\.1"):
        shard_group(2, 2, 4)
    for bad in ((-1, 1, 4), (0, 0, 4), (0, 1, 0)):
        with pytest.raises(ShardGroupError):
            shard_group(*bad)


def test_a_statefulset_pods_hostname_gives_its_ordinal() -> None:
    assert ordinal_of("eva-0") == 0
    assert ordinal_of("eva-bot-12") == 12
    assert ordinal_of("eva-3.eva.default.svc.cluster.local") == 3
    for name in ("eva", "eva-", "eva-01", "eva-x", "eva-3a", ""):
        with pytest.raises(ShardGroupError, match="does not end in -<ordinal>"):
            ordinal_of(name)


@given(shard_count=st.integers(1, 300), per_group=st.integers(1, 40))
def test_every_shard_is_owned_by_exactly_one_ordinal(shard_count: int, per_group: int) -> None:
    owners: dict[int, list[int]] = {}
    for ordinal in range(groups(shard_count, per_group)):
        shards = shard_group(ordinal, per_group, shard_count)
        assert shards, ordinal
        for shard in shards:
            owners.setdefault(shard, []).append(ordinal)
    assert sorted(owners) == list(range(shard_count))
    assert all(len(ordinals) == 1 for ordinals in owners.values())
    with pytest.raises(ShardGroupError):  # one more process would have nothing to run
        shard_group(groups(shard_count, per_group), per_group, shard_count)
