# Which shards a process runs when processes are numbered: a Kubernetes StatefulSet's pods,
# or any fleet whose members know only their own number (their *ordinal*).
#
# Pure: numbers and names in, shard ids out; it reads no environment, hostname or file.
# Process `o` of a fleet whose processes carry `per_group` shards each runs the shards
# `o*per_group .. o*per_group+per_group-1`, cut at the shard count: the last group may be
# smaller when the count is not a multiple of the group size.
# Invariants: for a shard count N and a group size K, the ordinals 0 .. groups(N, K)-1 own
# every shard 0 .. N-1 exactly once, and any other ordinal is refused (with what would fit),
# never given an empty or a foreign group.
#
# A StatefulSet's pod is named, and its hostname set to, `<statefulset name>-<ordinal>`
# (kubernetes.io/docs/concepts/workloads/controllers/statefulset, "Stable Network ID",
# checked 2026-12-07).
from __future__ import annotations

import re

_ORDINAL_AT_END = re.compile(r"-(0|[1-9][0-9]*)$")


class ShardGroupError(ValueError):
    """A fleet's numbers that give a process no shards, or a name with no ordinal."""


def groups(shard_count: int, per_group: int) -> int:
    """How many processes carry `shard_count` shards, `per_group` each (the replicas)."""
    _check(shard_count, per_group)
    return -(-shard_count // per_group)


def shard_group(ordinal: int, per_group: int, shard_count: int) -> list[int]:
    """The shard ids process `ordinal` runs: `ordinal*per_group` on, `per_group` of them,
    none at or past `shard_count`. Refused for an ordinal that would get none."""
    _check(shard_count, per_group)
    if ordinal < 0:
        raise ShardGroupError(f"a process's ordinal is 0 or more, not {ordinal}")
    first = ordinal * per_group
    if first >= shard_count:
        raise ShardGroupError(
            f"process {ordinal} would run shards {first}..{first + per_group - 1}, but there "
            f"are only {shard_count} shard(s) (0..{shard_count - 1}): {shard_count} shards of "
            f"{per_group} per process need {groups(shard_count, per_group)} process(es), "
            f"ordinals 0..{groups(shard_count, per_group) - 1}"
        )
    return list(range(first, min(first + per_group, shard_count)))


def ordinal_of(hostname: str) -> int:
    """The ordinal a StatefulSet's pod carries at the end of its name (`eva-3` is 3)."""
    name = hostname.split(".", 1)[0]  # a fully qualified name: the pod's own label first
    found = _ORDINAL_AT_END.search(name)
    if found is None:
        raise ShardGroupError(
            f"the hostname {hostname!r} does not end in -<ordinal>, as a StatefulSet's pod's "
            "does (e.g. eva-0)"
        )
    return int(found.group(1))


def _check(shard_count: int, per_group: int) -> None:
    if shard_count < 1:
        raise ShardGroupError(f"a shard count is at least 1, not {shard_count}")
    if per_group < 1:
        raise ShardGroupError(f"a process runs at least 1 shard, not {per_group}")
