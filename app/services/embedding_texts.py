"""The text a stored memory is embedded as, the way its write made it (import and model switches re-embed)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import asyncpg

from app.repositories.conversation import TurnKey, turns_before
from app.retrieval.conversation import PREVIOUS_TURNS, episode_representation
from app.services.code import code_embedding_text


class TextSource(Protocol):
    """The columns of a memory its embedded text is made of."""

    @property
    def id(self) -> uuid.UUID: ...
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
    @property
    def butler(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def created_at(self) -> Any: ...


async def embedding_texts(
    conn: asyncpg.Connection, *, tenant_id: str, sources: Sequence[TextSource]
) -> list[str]:
    """Per source, in order: code with its header, an episode with the turns before it, else the content."""
    turns = [
        TurnKey(s.butler, s.session_id, s.created_at, s.id)
        for s in sources
        if s.kind == "episode" and s.butler is not None and s.session_id is not None
    ]
    before = await turns_before(conn, tenant_id=tenant_id, keys=turns, count=PREVIOUS_TURNS)
    texts = []
    for s in sources:
        if s.kind == "code" and s.path is not None:
            texts.append(code_embedding_text(s.path, s.symbol_kind, s.parent_symbol, s.symbol, s.content))
        elif s.id in before:
            texts.append(episode_representation([text for _, text in reversed(before[s.id])], s.content))
        else:
            texts.append(s.content)
    return texts
