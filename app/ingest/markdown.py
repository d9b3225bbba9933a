"""Chunking markdown memory files: whole lines, ~400 tokens, ~80 tokens of overlap."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.hashing import content_hash


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A run of whole lines of a file (1-based, inclusive)."""

    start_line: int
    end_line: int
    content: str
    content_hash: str


def estimate_tokens(text: str) -> int:
    """Tokens as characters / 4: close to MiniLM's wordpieces for English prose, and free."""
    return math.ceil(len(text) / 4)


def _chunk(lines: list[str], start: int, end: int) -> TextChunk:
    while end - 1 > start and not lines[end - 1].strip():
        end -= 1  # trailing blank lines would only blur end_line
    content = "\n".join(lines[start:end])
    return TextChunk(start + 1, end, content, content_hash(content))


def chunk_markdown(text: str, *, target_tokens: int = 400, overlap_tokens: int = 80) -> list[TextChunk]:
    """Split text into chunks of whole lines; prefer to start a chunk at a heading."""
    if not text.strip():
        return []
    lines = text.split("\n")
    costs = [estimate_tokens(line) + 1 for line in lines]
    chunks: list[TextChunk] = []
    start = 0
    while start < len(lines):
        end = start
        size = 0
        while end < len(lines):
            if end > start and size + costs[end] > target_tokens:
                break
            # Break before a heading once the chunk is half full: boundaries then follow the
            # document's sections, so an edit in one section leaves the other chunks untouched.
            if end > start and lines[end].startswith("#") and size >= target_tokens // 2:
                break
            size += costs[end]
            end += 1
        if any(line.strip() for line in lines[start:end]):
            chunks.append(_chunk(lines, start, end))
        if end >= len(lines):
            break
        if lines[end].startswith("#"):
            start = end  # a section boundary needs no overlap
            continue
        back = end
        overlap = 0
        while back - 1 > start and overlap + costs[back - 1] <= overlap_tokens:
            back -= 1
            overlap += costs[back]
        start = back
    return chunks
