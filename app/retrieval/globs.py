"""Path globs with gitignore semantics (pathspec), as one regular expression for PostgreSQL and RE2.

`recalld index` reads .gitignore files with the same pathspec patterns, so a glob means the same
thing on both sides. The regex is matched by PostgreSQL in the search legs and by RE2 in Python
(symbol and multi-hop hits): neither backtracks, so no glob makes matching take exponential time.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import re2
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

# pathspec marks "matched a directory" with a named group; PostgreSQL has no named groups.
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


class GlobError(ValueError):
    """A glob that is empty, a comment, a negation, ends in a lone backslash or has an invalid class."""


@lru_cache(maxsize=512)
def glob_to_regex(glob: str) -> str:
    """`Sources/Auth/**`, `**/Tests/**`, `*.swift` (any folder), `[ab].py` -> an anchored regex."""
    text = glob.strip()
    text = text.removeprefix("./")
    if (len(text) - len(text.rstrip("\\"))) % 2:
        # An odd run of trailing backslashes leaves the last one escaping nothing: pathspec raises
        # its own error for it, which used to escape as a 500.
        raise GlobError(f"{glob!r} ends in a lone backslash, which escapes nothing (use / between folders)")
    try:
        regex, include = GitIgnoreSpecPattern.pattern_to_regex(text)
    except ValueError as exc:
        raise GlobError(f"{glob!r} is not a valid path glob") from exc
    if regex is None or include is not True:
        raise GlobError(f"{glob!r} is not a path glob (empty, a comment, a negation or an unclosed '[')")
    regex = _NAMED_GROUP.sub("(?:", regex)
    try:
        _compiled(regex)
    except re2.error as exc:
        raise GlobError(f"{glob!r} is not a valid glob: {exc}") from exc
    return regex


@lru_cache(maxsize=512)
def _compiled(regex: str) -> Any:
    return re2.compile(regex)


def path_matches(regex: str, path: str) -> bool:
    """Whether path matches a regex from glob_to_regex, in time linear in the path (RE2)."""
    return _compiled(regex).search(path) is not None
