"""Content hashes: the one digest the server stores and `recalld index` compares against."""

from __future__ import annotations

import hashlib


def content_hash(text: str) -> str:
    """Hex SHA-256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()
