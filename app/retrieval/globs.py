"""Path globs with `**` turned into anchored regular expressions (valid in Python and PostgreSQL)."""

from __future__ import annotations

import re


def glob_to_regex(pattern: str) -> str:
    """`Sources/Auth/**`, `**/Tests/**`, `*.swift` (any folder), `?` one char -> an anchored regex."""
    pattern = pattern.strip().lstrip("./")
    if "/" not in pattern:
        pattern = "**/" + pattern  # a bare name pattern matches in any folder
    out = ["^"]
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    out.append("$")
    return "".join(out)
