"""Source code into symbol-level chunks with declared and referenced names (no I/O)."""

from __future__ import annotations

from collections.abc import Iterator

from app.ingest.code_model import CodeChunk, CodeReference, Symbol
from app.ingest.paths import detect_language
from app.ingest.python_symbols import python_symbols
from app.ingest.tree_sitter_symbols import tree_sitter_symbols


def _dedupe(refs: list[CodeReference], own: str | None) -> tuple[CodeReference, ...]:
    seen: dict[tuple[str, str], CodeReference] = {}
    for ref in sorted(refs, key=lambda r: r.line):
        if ref.kind == "calls" and ref.name == own:
            continue  # a method calling a same-named method elsewhere is not useful as self-reference
        seen.setdefault((ref.name, ref.kind), ref)
    return tuple(seen.values())


def _windows(start: int, end: int, size: int, overlap: int) -> Iterator[tuple[int, int]]:
    step = max(1, size - overlap)
    first = start
    while True:
        last = min(end, first + size - 1)
        yield first, last
        if last >= end:
            return
        first += step


def _slice(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start : end + 1])


def _fallback_chunks(lines: list[str], max_lines: int, overlap: int) -> list[CodeChunk]:
    chunks = []
    for start, end in _windows(0, len(lines) - 1, max_lines, overlap):
        text = _slice(lines, start, end)
        if text.strip():
            chunks.append(CodeChunk(None, "module", None, start + 1, end + 1, text, (), ()))
    return chunks


_COMMENT_PREFIXES = ("///", "//", "/*", "*", "#", "@")


def _attach_leading_comments(symbols: list[Symbol], lines: list[str]) -> None:
    """A doc comment (or attribute) right above a declaration belongs to its chunk."""
    starts = {s.start for s in symbols}
    for sym in symbols:
        while sym.start > 0 and (sym.start - 1) not in starts:
            above = lines[sym.start - 1].strip()
            if not above.startswith(_COMMENT_PREFIXES):
                break
            sym.start -= 1


MAX_CHUNK_CHARS = 8000


def _pieces(chunk: CodeChunk, max_chars: int) -> list[CodeChunk]:
    """The chunk cut at line ends (and inside a line longer than max_chars) into pieces of at most max_chars."""
    if len(chunk.content) <= max_chars:
        return [chunk]
    spans: list[tuple[int, str]] = []  # (line number, text) of each piece
    current: list[str] = []
    current_start = chunk.start_line
    for number, line in enumerate(chunk.content.split("\n"), start=chunk.start_line):
        if current and sum(len(part) + 1 for part in current) + len(line) > max_chars:
            spans.append((current_start, "\n".join(current)))
            current = []
        if not current:
            current_start = number
        while len(line) > max_chars:
            if current:
                spans.append((current_start, "\n".join(current)))
                current = []
            spans.append((number, line[:max_chars]))
            line = line[max_chars:]
            current_start = number
        current.append(line)
    if current and any(current):
        spans.append((current_start, "\n".join(current)))
    return [
        CodeChunk(
            chunk.symbol,
            chunk.symbol_kind,
            chunk.parent_symbol,
            start,
            start + text.count("\n"),
            text,
            chunk.declared,
            chunk.references if index == 0 else (),
        )
        for index, (start, text) in enumerate(spans)
    ]


def parse_code(
    path: str,
    content: str,
    *,
    max_chunk_lines: int = 120,
    overlap_lines: int = 15,
    max_chunk_chars: int = MAX_CHUNK_CHARS,
) -> list[CodeChunk]:
    """Chunks at symbol boundaries, none longer than max_chunk_chars; never raises."""
    # A minified file is one enormous line: without the cap it became one chunk whose tsvector
    # could pass PostgreSQL's 1 MB limit (a 500) and whose text no embedding can represent.
    chunks = _symbol_chunks(path, content, max_chunk_lines=max_chunk_lines, overlap_lines=overlap_lines)
    return [piece for chunk in chunks for piece in _pieces(chunk, max_chunk_chars)]


def _symbol_chunks(path: str, content: str, *, max_chunk_lines: int, overlap_lines: int) -> list[CodeChunk]:
    lines = content.split("\n")
    if not content.strip():
        return []
    language = detect_language(path)
    try:
        if language == "python":
            symbols, module_refs = python_symbols(content)
        elif language is not None:
            symbols, module_refs = tree_sitter_symbols(content, language)
        else:
            return _fallback_chunks(lines, max_chunk_lines, overlap_lines)
    except (SyntaxError, ValueError, RecursionError):
        return _fallback_chunks(lines, max_chunk_lines, overlap_lines)

    _attach_leading_comments(symbols, lines)
    chunks: list[CodeChunk] = []
    covered: set[int] = set()
    for sym in symbols:
        is_type = sym.kind not in ("function", "method")
        end = sym.end
        if (
            is_type
            and sym.end - sym.start + 1 > max_chunk_lines
            and sym.body_start is not None
            and sym.body_start > sym.start
        ):
            end = sym.body_start - 1  # a big type: its header, the members have chunks of their own
        declared = (sym.name,)
        for first, last in _windows(sym.start, end, max_chunk_lines, overlap_lines):
            refs = [r for r in sym.refs if r.kind != "calls" or first + 1 <= r.line <= last + 1]
            chunks.append(
                CodeChunk(
                    sym.name,
                    sym.kind,
                    sym.parent,
                    first + 1,
                    last + 1,
                    _slice(lines, first, last),
                    declared,
                    _dedupe(refs, sym.name if sym.kind in ("function", "method") else None),
                )
            )
        covered.update(range(sym.start, sym.end + 1))
    # Lines outside every symbol (imports, top-level code) become module chunks.
    run: list[int] = []
    for index in [*range(len(lines)), len(lines)]:
        if index < len(lines) and index not in covered:
            run.append(index)
            continue
        if run and any(lines[i].strip() for i in run):
            first, last = run[0], run[-1]
            while not lines[first].strip():
                first += 1
            while not lines[last].strip():
                last -= 1
            for start, end in _windows(first, last, max_chunk_lines, overlap_lines):
                refs = [r for r in module_refs if start + 1 <= r.line <= end + 1]
                chunks.append(
                    CodeChunk(
                        None,
                        "module",
                        None,
                        start + 1,
                        end + 1,
                        _slice(lines, start, end),
                        (),
                        _dedupe(refs, None),
                    )
                )
        run = []
    chunks.sort(key=lambda c: (c.start_line, c.end_line, c.symbol or ""))
    return chunks
