"""What the code parser produces: chunks, the names they declare and refer to, identifier parts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

REFERENCE_KINDS = ("calls", "inherits", "conforms", "extends", "imports")
# The relations between symbols (imports relate modules): what research and multi-hop follow.
STRUCTURAL_RELATIONS = ("calls", "inherits", "conforms", "extends")


@dataclass(frozen=True, slots=True)
class CodeReference:
    """A name a chunk refers to, and how."""

    name: str
    kind: str
    line: int


@dataclass(frozen=True, slots=True)
class CodeChunk:
    """A symbol-level piece of a source file (1-based inclusive lines)."""

    symbol: str | None
    symbol_kind: str
    parent_symbol: str | None
    start_line: int
    end_line: int
    content: str
    declared: tuple[str, ...]
    references: tuple[CodeReference, ...]


@dataclass(slots=True)
class Symbol:
    """A declaration found by a language front end (0-based lines), before it becomes chunks."""

    name: str
    kind: str
    parent: str | None
    start: int  # 0-based line
    end: int  # 0-based inclusive
    body_start: int | None = None  # first member line of a type, for header chunks
    refs: list[CodeReference] = field(default_factory=list)
    nested_members: bool = False


def split_identifier(name: str) -> list[str]:
    """authenticateUser -> [authenticate, user]; HTTPClient -> [http, client]; snake_case too."""
    parts: list[str] = []
    for chunk in re.split(r"[^A-Za-z0-9]+", name):
        parts.extend(re.findall(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|[A-Z]+|\d+", chunk))
    return [p.lower() for p in parts if p]
