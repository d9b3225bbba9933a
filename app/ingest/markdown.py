"""Chunking markdown memory files: whole lines, ~400 tokens, ~80 tokens of overlap.

A line longer than a whole chunk is cut into chunk-sized pieces, each a chunk of its own with that
line's number: a minified 1 MiB line used to become one unbounded chunk.
"""

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


def _chunk(lines: list[str], numbers: list[int], start: int, end: int) -> TextChunk:
    while end - 1 > start and not lines[end - 1].strip():
        end -= 1  # trailing blank lines would only blur end_line
    content = "\n".join(lines[start:end])
    return TextChunk(numbers[start], numbers[end - 1], content, content_hash(content))


def _segments(text: str, max_chars: int) -> tuple[list[str], list[int]]:
    """The text's lines, those longer than max_chars cut into pieces, with each piece's line number."""
    pieces: list[str] = []
    numbers: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        for offset in range(0, max(len(line), 1), max_chars):
            pieces.append(line[offset : offset + max_chars])
            numbers.append(number)
    return pieces, numbers


def chunk_markdown(text: str, *, target_tokens: int = 400, overlap_tokens: int = 80) -> list[TextChunk]:
    """Split text into chunks of whole lines; prefer to start a chunk at a heading."""
    if not text.strip():
        return []
    # A full piece costs target_tokens + 1, so it never shares a chunk with another piece of its line
    # (joining two pieces with a newline would put one in the text that the file does not have).
    lines, numbers = _segments(text, target_tokens * 4)
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
            chunks.append(_chunk(lines, numbers, start, end))
        if end >= len(lines):
            break
        if lines[end].startswith("#") or costs[end] + overlap_tokens > target_tokens:
            # A section boundary needs no overlap; nor does a next line too long to share a chunk
            # with one (the overlap would only come back as a chunk of its own).
            start = end
            continue
        back = end
        overlap = 0
        while back - 1 > start and overlap + costs[back - 1] <= overlap_tokens:
            back -= 1
            overlap += costs[back]
        start = back
    return chunks
