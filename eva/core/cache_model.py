# A model of Anthropic's prompt cache, for simulating what Eva's replies would read and write.
#
# Pure: the time is an argument (seconds on any clock) and blocks are values
# (token counts and keys that stand for their text, e.g. hashes). It knows
# nothing of the real service beyond its published rules, which it models so:
# - a request is a sequence of blocks, some carrying a cache mark;
# - a cache entry is the prefix of a request up to one of its marks;
# - a request reads the longest prefix of itself, ending at a block boundary
#   at most `lookback` blocks before one of its marks, that is an entry still
#   alive; entries live `ttl_s` from their last read or write;
# - the tokens from the end of that read up to the last mark are written
#   (every mark's prefix becomes an entry); the tokens after the last mark are
#   ordinary input;
# - a read refreshes the entry it read; a write or read at a mark refreshes
#   that mark's entry.
# A block's key stands for its text: equal keys mean equal tokens.
# Not modelled: the minimum cacheable length and the limit of four marks.
# Invariants: read + write + uncached equals the request's tokens.
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

TTL_SECONDS: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a request: its size in tokens, a key for its text, and a cache mark."""

    tokens: int
    key: str
    mark: bool = False


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """The input tokens of one request: read from cache, written to it, and neither."""

    read: int = 0
    write: int = 0
    uncached: int = 0

    @property
    def total(self) -> int:
        return self.read + self.write + self.uncached


def block_key(text: str) -> str:
    """A key for a block's text: a short hash of its UTF-8 bytes."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(slots=True)
class CacheSimulator:
    """The prompt cache of one account, as requests arrive in time order."""

    ttl_s: float
    lookback: int = LOOKBACK_BLOCKS
    entries: dict[str, float] = field(default_factory=dict)
    """Prefix key -> the time it was last read or written."""
    _block_keys: list[str] = field(default_factory=list)
    _prefix_keys: list[str] = field(default_factory=list)
    _tokens_before: list[int] = field(default_factory=lambda: [0])

    def alive(self, key: str, now_s: float) -> bool:
        used = self.entries.get(key)
        return used is not None and now_s < used + self.ttl_s

    def request(self, blocks: Sequence[Block], now_s: float) -> RequestUsage:
        """Send one request at `now_s`: what it reads, writes and pays as ordinary input."""
        keys, before = self._prefixes(blocks)
        marks = [i for i, block in enumerate(blocks) if block.mark]
        read_end = 0  # blocks[:read_end] are read from cache
        for mark in marks:
            for i in range(mark, max(mark - self.lookback - 1, read_end - 1), -1):
                if self.alive(keys[i], now_s):
                    read_end = i + 1
                    break
        if read_end:
            self.entries[keys[read_end - 1]] = now_s
        write_end = marks[-1] + 1 if marks else 0
        for mark in marks:
            self.entries[keys[mark]] = now_s
        self._forget_dead(now_s)
        return RequestUsage(
            read=before[read_end],
            write=before[write_end] - before[read_end],
            uncached=before[len(blocks)] - before[write_end],
        )

    def _prefixes(self, blocks: Sequence[Block]) -> tuple[list[str], list[int]]:
        """The key of each prefix and the tokens before each block (and in all of them).

        The part shared with the previous request is not hashed again: a
        request usually repeats the one before it and adds a block or two.
        """
        old = self._block_keys
        same = 0
        limit = min(len(old), len(blocks))
        while same < limit and blocks[same].key == old[same]:
            same += 1
        keys = self._prefix_keys[:same]
        before = self._tokens_before[: same + 1]
        chained = bytes.fromhex(keys[-1]) if keys else b""
        for block in blocks[same:]:
            chained = hashlib.blake2b(chained + block.key.encode(), digest_size=16).digest()
            keys.append(chained.hex())
            before.append(before[-1] + block.tokens)
        self._block_keys = [block.key for block in blocks]
        self._prefix_keys, self._tokens_before = keys, before
        return keys, before

    def _forget_dead(self, now_s: float) -> None:
        if len(self.entries) > 4096:
            self.entries = {k: t for k, t in self.entries.items() if now_s < t + self.ttl_s}
