"""Query parsing and keyword-query construction that no user string can break."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_WORDS = 64
MAX_SEARCH_TEXT_CHARS = 200_000
_CJK = (
    "\u1100-\u11ff"  # Hangul jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
)
CJK_RUN = re.compile(f"[{_CJK}]+")
# Letters and digits that are not CJK; underscores split words like PostgreSQL's parser does.
WORD = re.compile(rf"[^\W_{_CJK}]+")


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query split into the pieces each keyword tier needs."""

    text: str
    words: tuple[str, ...]
    cjk_runs: tuple[str, ...]
    cjk_bigrams: tuple[str, ...]

    @property
    def is_empty(self) -> bool:
        """True when nothing searchable is left."""
        return not self.words and not self.cjk_runs


def _dedupe(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def cjk_bigrams(text: str) -> list[str]:
    """Overlapping character bigrams of every CJK run in text (a lone character stands alone)."""
    out: list[str] = []
    for run in CJK_RUN.findall(text):
        out.extend(_bigrams(run))
    return out


def parse_query(text: str) -> ParsedQuery:
    """Split a user query into lowercase words, CJK runs and CJK bigrams."""
    stripped = text.strip()
    words = _dedupe([w.lower() for w in WORD.findall(stripped)])[:MAX_WORDS]
    runs = _dedupe(CJK_RUN.findall(stripped))
    return ParsedQuery(text=stripped, words=words, cjk_runs=runs, cjk_bigrams=_dedupe(cjk_bigrams(stripped)))


def keyword_query_text(q: ParsedQuery) -> str:
    """The text the keyword leg hands to PostgreSQL's parser: the words, then the CJK bigrams."""
    return " ".join((*q.words, *q.cjk_bigrams))


def search_text_for(content: str, extra_terms: Sequence[str] = ()) -> str:
    """What the keyword index sees: content, its CJK bigrams, and extra terms (tags, identifiers).

    PostgreSQL's parser keeps a CJK run as one token, so a two-character query would never
    match a longer sentence; the bigrams make each pair of characters a token of its own.
    """
    parts = [content]
    bigrams = cjk_bigrams(content)
    if bigrams:
        parts.append(" ".join(bigrams))
    if extra_terms:
        parts.append(" ".join(extra_terms))
    # PostgreSQL refuses a tsvector over 1 MB (a 500 on the write); chunks are far below this,
    # so the cut only ever guards against a text no chunker bounded.
    return "\n".join(parts)[:MAX_SEARCH_TEXT_CHARS]


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def ilike_patterns(q: ParsedQuery) -> list[str]:
    """ILIKE patterns of the last-resort tier: CJK runs (1+ chars) and words of 3+ chars."""
    terms = [*q.cjk_runs, *(w for w in q.words if len(w) >= 3)]
    return [f"%{_like_escape(term)}%" for term in terms]
