"""What any client-sent JSON value, path or TOML text must satisfy before it is stored or used.

One place for REST bodies, MCP arguments and batch items (the API models call it), so a value
that PostgreSQL cannot store, or that would make a later response unserialisable, is a 422 at
the door and never a 500 after the commit. Every walk here is iterative: a value nested a
thousand levels deep is an answer, not a RecursionError.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, Strict
from pydantic_core import PydanticCustomError

MAX_JSON_DEPTH = 32
# A whole request body may nest a few levels more than the metadata it carries (a batch puts
# each item's metadata three levels down), so the same metadata is accepted through every door.
MAX_BODY_DEPTH = 64
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_KEYS = 256
MAX_TOML_BYTES = 64 * 1024
# A number a client sends is 0 or at least this far from it. Scoring multiplies stored numbers
# in SQL (confidence decay), and PostgreSQL raises an error where a product of non-zero floats
# rounds to zero: one fact with a decay rate of 5e-324 made every later search answer 500.
# Nothing a memory or a request means changes below a millionth.
MIN_NONZERO_MAGNITUDE = 1e-6
_SURROGATE = re.compile("[\ud800-\udfff]")


class InputRuleError(ValueError):
    """A value breaks one of the rules; the message says where and which."""


def _where(path: list[str]) -> str:
    where = ".".join(path) or "the value"
    return where if len(where) <= 120 else f"{where[:117]}..."


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored"
    if _SURROGATE.search(text):
        return "contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid Unicode"
    return None


def check_json_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH, where: str = "") -> int:
    """Raise InputRuleError for nesting deeper than max_depth, NUL or lone surrogates in strings
    (keys too) and non-finite numbers; return how many object keys the value holds."""
    keys = 0
    stack: list[tuple[Any, list[str], int]] = [(value, [where] if where else [], 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            problem = _string_problem(item)
            if problem is not None:
                raise InputRuleError(f"{_where(path)} {problem}")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputRuleError(f"{_where(path)} is {item}: JSON numbers must be finite")
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                raise InputRuleError(f"{_where(path)} nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                keys += len(item)
                for key, child in item.items():
                    key_text = str(key)
                    problem = _string_problem(key_text)
                    if problem is not None:
                        raise InputRuleError(f"a key of {_where(path)} {problem}")
                    stack.append((child, [*path, key_text], depth + 1))
            else:
                stack.extend((child, [*path, str(i)], depth + 1) for i, child in enumerate(item))
    return keys


def check_number(value: float) -> float:
    """Raise InputRuleError for a non-finite number, or a non-zero one closer to 0 than
    MIN_NONZERO_MAGNITUDE; return the value."""
    if not math.isfinite(value):
        raise InputRuleError(f"{value} is not a finite number")
    if value != 0 and abs(value) < MIN_NONZERO_MAGNITUDE:
        raise InputRuleError(
            f"{value!r} is too close to 0: send 0, or a number of magnitude {MIN_NONZERO_MAGNITUDE:g} or more"
        )
    return value


def check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """The JSON rules, plus at most MAX_METADATA_KEYS keys and MAX_METADATA_BYTES as JSON."""
    keys = check_json_value(value)
    if keys > MAX_METADATA_KEYS:
        raise InputRuleError(f"metadata has {keys} keys; at most {MAX_METADATA_KEYS} are allowed")
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise InputRuleError(
            f"metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES} (16 KiB) are allowed"
        )
    return value


def toml_nesting_depth(text: str) -> int:
    """Deepest nesting of arrays and inline tables in a TOML text, outside strings and comments.

    tomllib recurses once per level, so this is checked before parsing.
    """
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if char in "\"'":
            quote = char * 3 if text.startswith(char * 3, i) else char
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                # Only basic strings have escapes; a literal string ends at its first quote.
                i += 2 if char == '"' and text[i] == "\\" else 1
            i += len(quote)
            continue
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return deepest


def check_toml_text(text: str) -> None:
    """At most MAX_TOML_BYTES and MAX_JSON_DEPTH levels of nesting, before tomllib sees it."""
    size = len(text.encode(errors="replace"))
    if size > MAX_TOML_BYTES:
        raise InputRuleError(f"TOML text is {size} bytes; at most {MAX_TOML_BYTES} (64 KiB) are allowed")
    if toml_nesting_depth(text) > MAX_JSON_DEPTH:
        raise InputRuleError(f"TOML nests deeper than {MAX_JSON_DEPTH} levels")


def _number_rule(value: float) -> float:
    try:
        return check_number(value)
    except InputRuleError as exc:
        raise PydanticCustomError("number_invalid", str(exc)) from exc


# What every number field of a request body is: a JSON number (true, false and "5" are 422s,
# not guesses), finite, and 0 or at least MIN_NONZERO_MAGNITUDE from it. Integers are strict too.
Number = Annotated[float, Strict(), AfterValidator(_number_rule)]
Integer = Annotated[int, Strict()]
