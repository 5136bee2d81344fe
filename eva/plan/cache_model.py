# A model of Anthropic's prompt cache, for planning what Eva's replies read, write and pay.
#
# Pure: the time is an argument (seconds on any clock) and blocks are values
# (token counts and keys that stand for their text, e.g. hashes). It knows
# nothing of the real service beyond its published rules (prompt-caching page
# of platform.claude.com, checked 2026-12-06), which it models so:
# - a request is a sequence of blocks in cache order (tools, system, messages),
#   at most four of them carrying a cache mark with a lifetime, "5m" or "1h";
#   a one-hour mark may not come after a five-minute one (CacheRuleError);
# - a mark whose prefix is shorter than the model's minimum caches nothing;
# - a cache entry is the prefix of a request up to one of its marks; it lives
#   its own lifetime from its last read or write;
# - a request reads the longest prefix of itself that is a live entry and ends
#   at a block boundary among the 20 positions that end at one of its marks
#   (the mark's own included);
# - it pays, with A the end of that read, B the last one-hour mark after A and
#   C the last mark: one-hour writes for A..B, five-minute writes for B..C,
#   ordinary input for what follows C;
# - every mark's prefix becomes (or stays) an entry, and the entry read is
#   refreshed.
# A block's key stands for its text: equal keys mean equal tokens.
# Invariants: read + write_5m + write_1h + uncached equals the request's tokens.
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from eva.core.events import Usage

TTL_SECONDS: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20
MAX_MARKS = 4


class CacheRuleError(ValueError):
    """A request the provider refuses: too many marks, or a one-hour mark after a shorter one."""


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a request: its size in tokens, a key for its text, and its cache mark."""

    tokens: int
    key: str
    ttl: str | None = None
    """The lifetime of the cache mark on this block ("5m" or "1h"), or None: no mark."""

    @property
    def mark(self) -> bool:
        return self.ttl is not None


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """The input tokens of one request: read from cache, written to it, and neither."""

    read: int = 0
    write_5m: int = 0
    write_1h: int = 0
    uncached: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h

    @property
    def total(self) -> int:
        return self.read + self.write + self.uncached

    def usage(self, output_tokens: int = 0) -> Usage:
        """As the Messages API reports it, with `output_tokens` of output."""
        return Usage(
            input_tokens=self.uncached,
            output_tokens=output_tokens,
            cache_write_tokens=self.write,
            cache_read_tokens=self.read,
            cache_write_1h_tokens=self.write_1h,
        )


def block_key(text: str) -> str:
    """A key for a block's text: a short hash of its UTF-8 bytes."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def check_marks(blocks: Sequence[Block]) -> None:
    """Refuse what the provider refuses: more than four marks, or "1h" after "5m"."""
    marked = [(i, block.ttl) for i, block in enumerate(blocks) if block.ttl is not None]
    if len(marked) > MAX_MARKS:
        raise CacheRuleError(
            f"a request may carry at most {MAX_MARKS} cache marks; this one has {len(marked)}"
        )
    for i, ttl in marked:
        if ttl not in TTL_SECONDS:
            raise CacheRuleError(f"block {i}: a cache mark's ttl is '5m' or '1h', not {ttl!r}")
    seen_short = None
    for i, ttl in marked:
        if ttl == "5m" and seen_short is None:
            seen_short = i
        elif ttl == "1h" and seen_short is not None:
            raise CacheRuleError(
                f"block {i}: a cache mark with ttl '1h' may not come after one with ttl '5m' "
                f"(block {seen_short}); blocks are taken in the order tools, system, messages"
            )


@dataclass(slots=True)
class CacheSimulator:
    """The prompt cache of one account, as requests arrive in time order."""

    min_tokens: int = 0
    """The shortest prefix the model caches; a mark ending before it caches nothing."""
    lookback: int = LOOKBACK_BLOCKS
    entries: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Prefix key -> (the time it was last read or written, its lifetime in seconds)."""
    _block_keys: list[str] = field(default_factory=list)
    _prefix_keys: list[str] = field(default_factory=list)
    _tokens_before: list[int] = field(default_factory=lambda: [0])

    def alive(self, key: str, now_s: float) -> bool:
        entry = self.entries.get(key)
        return entry is not None and now_s < entry[0] + entry[1]

    def request(self, blocks: Sequence[Block], now_s: float) -> RequestUsage:
        """Send one request at `now_s`: what it reads, writes and pays as ordinary input."""
        check_marks(blocks)
        keys, before = self._prefixes(blocks)
        marks = [i for i, block in enumerate(blocks)
                 if block.mark and before[i + 1] >= self.min_tokens]
        read_end = 0  # blocks[:read_end] are read from cache
        for mark in marks:
            for i in range(mark, max(mark - self.lookback, read_end - 1), -1):
                if self.alive(keys[i], now_s):
                    read_end = max(read_end, i + 1)
                    break
        if read_end:
            self.entries[keys[read_end - 1]] = (now_s, self.entries[keys[read_end - 1]][1])
        long_marks = [m + 1 for m in marks if blocks[m].ttl == "1h" and m + 1 > read_end]
        one_hour_end = long_marks[-1] if long_marks else read_end
        write_end = max(marks[-1] + 1, read_end) if marks else read_end
        for mark in marks:
            ttl_s = TTL_SECONDS[blocks[mark].ttl or "5m"]
            if mark + 1 > read_end or not self.alive(keys[mark], now_s):
                self.entries[keys[mark]] = (now_s, ttl_s)
            else:
                self.entries[keys[mark]] = (now_s, max(ttl_s, self.entries[keys[mark]][1]))
        self._forget_dead(now_s)
        return RequestUsage(
            read=before[read_end],
            write_1h=before[one_hour_end] - before[read_end],
            write_5m=before[write_end] - before[one_hour_end],
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
            self.entries = {k: e for k, e in self.entries.items() if now_s < e[0] + e[1]}
