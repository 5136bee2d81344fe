# Planning the tree: what a new leaf or a complete pair needs, decided without scanning.
#
# Pure: it is told what exists (`has_line`) and what texts the halves hold; it
# never looks at the tree as a whole and never calls a model. It returns either
# the finished text (verbatim leaf or glue) or the task a summarizer must do.
# Invariants: a leaf is verbatim exactly when its rendered message fits the
# limit; a parent is glue exactly when `join_glue` of its halves fits; a pair is
# ready only when both halves exist and all its messages have leaves.
from __future__ import annotations

from collections.abc import Callable

from eva.core.address import Address, halves, last, leaf, parent, sibling
from eva.core.render import LINE_LIMIT_BYTES, fits, join_glue
from eva.core.summarize import LeafTask, MergeTask


def leaf_work(
    index: int, name: str, rendered: str, limit: int = LINE_LIMIT_BYTES
) -> str | LeafTask:
    """The leaf of message `index`: its rendered text if it fits, else the task to compress it."""
    if fits(rendered, limit):
        return rendered
    return LeafTask(address=leaf(index), name=name, text=rendered)


def glue_or_task(
    address: Address, left_text: str, right_text: str, limit: int = LINE_LIMIT_BYTES
) -> str | MergeTask:
    """The parent at `address`: its halves glued if that fits, else the task to merge them."""
    halves(address)  # raises for a leaf, which has no halves
    glued = join_glue(left_text, right_text)
    if fits(glued, limit):
        return glued
    return MergeTask(address=address, left_text=left_text, right_text=right_text)


def newly_ready(
    written: Address, has_line: Callable[[Address], bool], leaves: int
) -> Address | None:
    """The parent that writing the line `written` makes ready, if any.

    It is ready when the sibling line exists and every message the parent
    covers has a leaf (`leaves` is how many messages, from index 0, have one).
    Whether the parent already exists is for the caller: a line made again
    after forget or an edit makes its parent due to be made again too.
    """
    above = parent(written)
    if last(above) >= leaves or not has_line(sibling(written)):
        return None
    return above
