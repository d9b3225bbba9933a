"""LlamaIndex: RecalldRetriever over memory_search (`pip install "recalld-client[llama-index]"`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from recalld_client._documents import hit_metadata
from recalld_client.async_client import AsyncClient
from recalld_client.client import Client
from recalld_client.models import SearchOut

# Metadata an LLM or an embedding model is shown with the text; the rest (ids, score breakdowns,
# highlights, counters) is for the program only.
_SHOWN_KEYS = frozenset({"type", "scope", "tags", "subject", "predicate", "path", "butler", "created_at"})


class RecalldRetriever(BaseRetriever):
    """Memories that match a query, as nodes: the memory's text, its score, its fields as metadata.

    `RecalldRetriever(base_url=..., api_key=...)`, or `RecalldRetriever(client=Client(...))` (an
    `async_client=AsyncClient(...)` serves `aretrieve` without a thread). `limit` results per query;
    `search_kwargs` are further memory_search arguments (scope, types, mode, filters, min_score, …).
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        async_client: AsyncClient | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        limit: int = 10,
        search_kwargs: Mapping[str, Any] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if client is None:
            url = base_url or (async_client.base_url if async_client else None)
            key = api_key or (async_client.api_key if async_client else None)
            client = Client(url, key)
        self.client = client
        self.async_client = async_client
        self.limit = limit
        self.search_kwargs = dict(search_kwargs or {})
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _arguments(self) -> dict[str, Any]:
        return {"limit": self.limit, **self.search_kwargs}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = self.client.memory_search(query_bundle.query_str, **self._arguments())
        return _nodes(found)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_client is None:
            return await asyncio.to_thread(self._retrieve, query_bundle)
        found = await self.async_client.memory_search(query_bundle.query_str, **self._arguments())
        return _nodes(found)


def _nodes(found: SearchOut) -> list[NodeWithScore]:
    nodes = []
    for hit in found.results:
        metadata = hit_metadata(hit)
        hidden = [key for key in metadata if key not in _SHOWN_KEYS]
        node = TextNode(
            id_=str(hit.id),
            text=hit.content,
            metadata=metadata,
            excluded_llm_metadata_keys=hidden,
            excluded_embed_metadata_keys=hidden,
        )
        nodes.append(NodeWithScore(node=node, score=hit.score))
    return nodes
