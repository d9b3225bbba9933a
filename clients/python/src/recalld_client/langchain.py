"""LangChain: RecalldRetriever, a BaseRetriever over memory_search (`pip install "recalld-client[langchain]"`)."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, SecretStr, model_validator

from recalld_client._documents import hit_metadata
from recalld_client.async_client import AsyncClient
from recalld_client.client import Client
from recalld_client.models import SearchOut


class RecalldRetriever(BaseRetriever):
    """Memories that match a query, as Documents: the memory's text, its score and fields in metadata.

    `RecalldRetriever(base_url=..., api_key=...)`, or `RecalldRetriever(client=Client(...))` (an
    `async_client=AsyncClient(...)` serves `ainvoke` without a thread). `limit` results per query;
    `search_kwargs` are further memory_search arguments (scope, types, mode, filters, min_score, …).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Client | None = None
    async_client: AsyncClient | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    limit: int = 10
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _connect(self) -> RecalldRetriever:
        if self.client is None:
            url = self.base_url or (self.async_client.base_url if self.async_client else None)
            key = self.api_key.get_secret_value() if self.api_key else None
            if key is None and self.async_client is not None:
                key = self.async_client.api_key
            self.client = Client(url, key)
        return self

    def _arguments(self) -> dict[str, Any]:
        return {"limit": self.limit, **self.search_kwargs}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        assert self.client is not None  # set by _connect
        return _documents(self.client.memory_search(query, **self._arguments()))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            # The blocking client, in a worker thread (LangChain's default for retrievers).
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        found = await self.async_client.memory_search(query, **self._arguments())
        return _documents(found)


def _documents(found: SearchOut) -> list[Document]:
    return [Document(page_content=h.content, metadata=hit_metadata(h), id=str(h.id)) for h in found.results]
