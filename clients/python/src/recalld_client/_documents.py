"""What the LangChain and LlamaIndex retrievers share: a search hit as content, score and metadata."""

from __future__ import annotations

from typing import Any

from recalld_client.models import SearchResult


def hit_metadata(hit: SearchResult) -> dict[str, Any]:
    """Every field of the hit but its text, as JSON values: id, type, score, scope, tags, the memory's own metadata, …"""
    metadata: dict[str, Any] = hit.model_dump(mode="json", exclude={"content"}, exclude_none=True)
    return metadata
