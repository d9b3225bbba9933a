"""Character spans of query matches in a result's content, for display."""

from __future__ import annotations

import re
from functools import lru_cache

import snowballstemmer

from app.retrieval.query import CJK_RUN, WORD, ParsedQuery

MAX_SPANS = 50
PREFIX = 3
_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer.stemWord(word))


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@lru_cache(maxsize=1024)
def _query_stems(words: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str]]:
    """The query words' stems and their first letters, once per query rather than once per result."""
    stems = frozenset(_stem(w) for w in words)
    # English stems keep the word's first letters, so most words are ruled out without stemming.
    return stems, frozenset(stem[:PREFIX] for stem in stems)


def highlight_spans(content: str, q: ParsedQuery) -> list[tuple[int, int]]:
    """[start, end) spans of words sharing an English stem with a query word, and of CJK matches."""
    stems, prefixes = _query_stems(q.words)
    spans: list[tuple[int, int]] = []
    if stems:
        for match in WORD.finditer(content):
            word = match.group().lower()
            if word[:PREFIX] in prefixes and _stem(word) in stems:
                spans.append(match.span())
    if q.cjk_runs:
        needles = sorted(set(q.cjk_runs) | set(q.cjk_bigrams), key=len, reverse=True)
        for run in CJK_RUN.finditer(content):
            text = run.group()
            for needle in needles:
                for found in re.finditer(re.escape(needle), text):
                    spans.append((run.start() + found.start(), run.start() + found.end()))
    return _merge(spans)[:MAX_SPANS]
