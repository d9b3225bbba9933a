"""File paths as recalld stores them: which suffixes are documents or code, the one path rule, path terms."""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath
from urllib.parse import unquote

from app.errors import ApiError

DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt", ".mdx", ".rst")
LANGUAGE_BY_SUFFIX = {
    ".swift": "swift",
    ".py": "python",
    ".pyi": "python",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".go": "go",
}
CODE_SUFFIXES = tuple(LANGUAGE_BY_SUFFIX)
MAX_PATH_CHARS = 512
MAX_CODE_FILE_CHARS = 1024 * 1024
# Unicode categories a path may not contain: controls, format characters (bidi overrides such
# as U+202E, which make `evil\u202egpj.md` display as `evildm.jpg`, and zero-width characters),
# lone surrogates (not storable) and line/paragraph separators.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_TERM_SEPARATORS = re.compile(r"[/._-]+")
# `C:/x.md` or `c:x.md`: absolute (or drive-relative) the moment a Windows client reads it back.
_DRIVE = re.compile(r"[A-Za-z]:")


def detect_language(path: str) -> str | None:
    """swift, python, typescript, javascript or go from the file name; None when unsupported."""
    return LANGUAGE_BY_SUFFIX.get(PurePosixPath(path.lower()).suffix)


def is_document(path: str) -> bool:
    """Whether the path names a markdown or text file."""
    return PurePosixPath(path.lower()).suffix in DOCUMENT_SUFFIXES


def _bad_segment(segment: str) -> bool:
    return segment in ("", ".", "..") or "/" in segment or "\\" in segment


def validate_relative_path(path: str) -> str:
    """The path unchanged when it is a clean relative POSIX path, else a 422 naming the rule it breaks."""
    shown = repr(path[:80])
    if not path or len(path) > MAX_PATH_CHARS:
        raise ApiError(422, "validation_error", f"path must be 1–{MAX_PATH_CHARS} characters")
    forbidden = next((c for c in path if unicodedata.category(c) in _FORBIDDEN_CATEGORIES), None)
    if forbidden is not None:
        raise ApiError(
            422,
            "validation_error",
            f"invalid path: no control, format or invisible characters (found U+{ord(forbidden):04X})",
        )
    if "\\" in path:
        raise ApiError(422, "validation_error", f"invalid path {shown}: no backslashes")
    if path.startswith(("/", "~")) or _DRIVE.match(path):
        raise ApiError(422, "validation_error", f"invalid path {shown}: must be relative (no root or drive)")
    # A segment is also judged as a URL would decode it: `%2e%2e` is `..` to whatever later
    # turns the path into a URL or a file name.
    if any(_bad_segment(unquote(part)) for part in path.split("/")):
        raise ApiError(
            422,
            "validation_error",
            f"invalid path {shown}: no '.', '..' or empty segments, even percent-encoded",
        )
    return path


def path_terms(path: str) -> list[str]:
    """The words of a path the keyword index also sees: memory/2026-11-20.md -> memory 2026 11 20 md."""
    return [part for part in _TERM_SEPARATORS.split(path) if part]
