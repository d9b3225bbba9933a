"""When two memories say the same thing: normalised content, its key, and lexical overlap. Pure."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")


def normalise(content: str) -> str:
    """The content as duplicates are compared: NFKC, case-folded, one space, no trailing punctuation.

    Only trailing punctuation goes: "Dr. Okafor" and "Dr Okafor" stay different words, while "…
    Augusta." and "… augusta" are the same sentence.
    """
    text = _SPACE.sub(" ", unicodedata.normalize("NFKC", content).casefold()).strip()
    end = len(text)
    while end > 0 and (unicodedata.category(text[end - 1]).startswith("P") or text[end - 1].isspace()):
        end -= 1
    return text[:end]


def content_key(content: str) -> bytes:
    """SHA-256 of the normalised content: what the duplicate index stores."""
    return hashlib.sha256(normalise(content).encode()).digest()


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two contents' normalised word sets, 0–1."""
    left = set(_WORD.findall(normalise(a)))
    right = set(_WORD.findall(normalise(b)))
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


# Near-duplicates: both signals over a floor. Measured on LoCoMo turns (docs/benchmarks.md,
# "Near-duplicates"): light rewrites of a turn against its nearest other turn and against the same
# turn with one content word replaced.
NEAR_SIMILARITY = 0.90
NEAR_OVERLAP = 0.6


def is_near_duplicate(similarity: float, overlap: float) -> bool:
    """Whether a cosine similarity and a word overlap together make a near-duplicate."""
    return similarity >= NEAR_SIMILARITY and overlap >= NEAR_OVERLAP
