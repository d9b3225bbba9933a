"""The text a stored memory is embedded as, the way its write made it (import and model switches re-embed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.services.code import code_embedding_text


class TextSource(Protocol):
    """The columns of a memory its embedded text is made of."""

    @property
    def kind(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def path(self) -> str | None: ...
    @property
    def symbol(self) -> str | None: ...
    @property
    def symbol_kind(self) -> str | None: ...
    @property
    def parent_symbol(self) -> str | None: ...


def embedding_texts(sources: Sequence[TextSource]) -> list[str]:
    """Per source, in order: code with its header, anything else (an episode too: the turn alone) as it is."""
    return [
        code_embedding_text(s.path, s.symbol_kind, s.parent_symbol, s.symbol, s.content)
        if s.kind == "code" and s.path is not None
        else s.content
        for s in sources
    ]
