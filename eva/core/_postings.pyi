# The C module of the recall index (eva/core/_postings.c); see `gather_python`.
from collections.abc import Callable, Sequence

BUCKET_BITS: int
MAX_TERM_CHARS: int
MAX_LENGTH: int
MAX_TF: int
RECORD_SIZE: int

def gather(
    texts: Sequence[tuple[int, str]], term_bytes: Callable[[str], list[bytes]], /
) -> list[tuple[int, dict[bytes, bytes], int, int]]: ...
