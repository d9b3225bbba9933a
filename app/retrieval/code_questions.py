"""Structural questions in words ('what calls X') into a (kind, symbol) pair (no I/O)."""

from __future__ import annotations

import re

from app.errors import ApiError

_WORD_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("implementations", re.compile(r"\b(?:implementations?|implementers|conformances?) of\s+(\w+)", re.I)),
    ("implementations", re.compile(r"\bwhat (?:implements|conforms to|inherits from|extends)\s+(\w+)", re.I)),
    ("callers", re.compile(r"\bwhat calls\s+(\w+)", re.I)),
    ("callers", re.compile(r"\b(?:callers|usages|uses) of\s+(\w+)", re.I)),
    ("callers", re.compile(r"\bwho calls\s+(\w+)", re.I)),
    ("callees", re.compile(r"\bwhat does\s+(\w+)\s+call", re.I)),
    ("callees", re.compile(r"\bcallees of\s+(\w+)", re.I)),
    ("dependencies", re.compile(r"\bdependencies of (?:module |package |directory )?([\w./-]+)", re.I)),
    ("dependencies", re.compile(r"\bwhat does (?:module |package )?([\w./-]+) (?:import|depend on)", re.I)),
    ("related", re.compile(r"\b(?:related to|components related to|similar to)\s+(\w+)", re.I)),
)


def parse_research_query(text: str) -> tuple[str, str]:
    """(kind, symbol) from a question in words, or a 422 listing what is understood."""
    for kind, pattern in _WORD_PATTERNS:
        match = pattern.search(text)
        if match:
            return kind, match.group(1)
    raise ApiError(
        422,
        "validation_error",
        "could not read the question; try 'implementations of X', 'what calls X', 'what does X call', "
        "'related to X', 'dependencies of module M', or send {kind, symbol}",
    )
