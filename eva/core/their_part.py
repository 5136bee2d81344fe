# What of a line of memory is one person's: the utterances it credits to them by name.
#
# Pure. A line reads "Name: what they said / Name: what they said" (both line writers
# write it so). A person asking for their data is given their own utterances of a line
# that credits others too, never the others' words; a line whose words name nobody gives
# nothing but its being there.
from __future__ import annotations

from collections.abc import Collection

from eva.core.summarize import PIECE_SEPARATOR, speaker_pieces


def their_part(text: str, names: Collection[str]) -> str:
    """The utterances of `text` whose speaker is one of `names` (any case), as the line
    writes them; empty when none is."""
    folded = {name.casefold() for name in names if name}
    line = text.casefold()
    if not any(name in line for name in folded):  # most lines: no utterance of theirs
        return ""
    return PIECE_SEPARATOR.join(
        f"{speaker}: {words}"
        for speaker, words in speaker_pieces(text)
        if speaker is not None and speaker.casefold() in folded
    )
