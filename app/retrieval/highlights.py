"""Character spans of query matches in a result's content, for display."""

from __future__ import annotations

import re
from functools import lru_cache

import snowballstemmer

from app.retrieval.query import CJK_RUN, WORD, ParsedQuery

MAX_SPANS = 50
PREFIX = 3
_stemmer = snowballstemmer.stemmer("english")
# The words PostgreSQL's `english` configuration drops (the Snowball English stop list): the
# keyword leg never matches them, so marking them would only colour every "the" in a result.
STOPWORDS = frozenset(
    # One string, as PostgreSQL's english.stop lists them, rather than 127 one-word lines.
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
    her hers herself it its itself they them their theirs themselves what which who whom this that
    these those am is are was were be been being have has had having do does did doing a an the and
    but if or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once here
    there when where why how all any both each few more most other some such no nor not only own
    same so than too very s t can will just don should now
    """.split()  # noqa: SIM905
)


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
def _query_stems(words: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The query words' stems, their first letters and the words to pass over, once per query."""
    content_words = tuple(w for w in words if w not in STOPWORDS)
    # A query of stopwords only ("the who") was matched by them, so they are marked then.
    skipped: frozenset[str] = STOPWORDS if content_words else frozenset()
    stems = frozenset(_stem(w) for w in content_words or words)
    # English stems keep the word's first letters, so most words are ruled out without stemming.
    return stems, frozenset(stem[:PREFIX] for stem in stems), skipped


def highlight_spans(content: str, q: ParsedQuery) -> list[tuple[int, int]]:
    """[start, end) spans of words sharing an English stem with a query word, and of CJK matches.

    Stopwords are neither looked for nor marked, unless the query holds nothing else.
    """
    stems, prefixes, skipped = _query_stems(q.words)
    spans: list[tuple[int, int]] = []
    if stems:
        for match in WORD.finditer(content):
            word = match.group().lower()
            if word[:PREFIX] in prefixes and word not in skipped and _stem(word) in stems:
                spans.append(match.span())
    if q.cjk_runs:
        needles = sorted(set(q.cjk_runs) | set(q.cjk_bigrams), key=len, reverse=True)
        for run in CJK_RUN.finditer(content):
            text = run.group()
            for needle in needles:
                for found in re.finditer(re.escape(needle), text):
                    spans.append((run.start() + found.start(), run.start() + found.end()))
    return _merge(spans)[:MAX_SPANS]
