"""AsyncClient: Client's methods as coroutines, for asyncio agents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal
from uuid import UUID

import httpx
from pydantic import BaseModel

from recalld_client import _core, _export, _transport
from recalld_client._core import Call, make_call, parse
from recalld_client.models import (
    BatchItem,
    BatchOut,
    CodeFileIn,
    CodeFileList,
    CodeFilesIn,
    CodeIndexOut,
    DocumentIn,
    DocumentList,
    DocumentOut,
    DocumentSlice,
    EpisodeIn,
    FactIn,
    FusionWeights,
    MemoryHistory,
    MemoryOut,
    MemoryPage,
    MemoryType,
    MemoryWriteOut,
    RecallIn,
    RecallOut,
    RecallWeightsIn,
    RerankOptions,
    ResearchIn,
    ResearchOut,
    RuleIn,
    ScopeSettings,
    SearchFilters,
    SearchIn,
    SearchOut,
)

ResearchKind = Literal["implementations", "callers", "callees", "related", "dependencies"]


class AsyncClient:
    """An asyncio recalld client: `async with AsyncClient(url, key) as recalld: await recalld.memory_search(...)`.

    Same methods, arguments, retries, idempotency keys and errors as Client.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        max_retries: int = _core.DEFAULT_MAX_RETRIES,
        max_retry_wait: float = _core.DEFAULT_MAX_RETRY_WAIT,
        idempotency_keys: bool = True,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._settings = _core.Settings.build(
            base_url, api_key, timeout, max_retries, max_retry_wait, idempotency_keys
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    @property
    def base_url(self) -> str:
        """The server's URL."""
        return self._settings.base_url

    @property
    def api_key(self) -> str | None:
        """The API key sent as the bearer token."""
        return self._settings.api_key

    async def aclose(self) -> None:
        """Close the connection pool (not an `http_client` passed in)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        return await _transport.asend(self._http, self._settings, call)

    def _write(self, operation: str, model: type[BaseModel], values: Mapping[str, Any]) -> Call:
        return _core.write_call(operation, _core.body(model, values), self._settings.idempotency_keys)

    # Health (no key needed).

    async def healthz(self) -> dict[str, Any]:
        """Liveness: the process answers."""
        result: dict[str, Any] = (await self._send(make_call("healthz"))).json()
        return result

    async def readyz(self) -> dict[str, Any]:
        """Readiness: database, migrations, embedder and keyword ranker checks."""
        result: dict[str, Any] = (await self._send(make_call("readyz"))).json()
        return result

    async def metrics(self) -> str:
        """Prometheus metrics text."""
        return (await self._send(make_call("metrics"))).text

    # Memory writes.

    async def memory_store_fact(
        self,
        content: str,
        *,
        subject: str | None = None,
        predicate: str | None = None,
        importance: float | None = None,
        scope: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None,
        decay_rate: float | None = None,
        last_confirmed_at: datetime | None = None,
        supersedes: UUID | str | None = None,
        supersede: Literal["subject_predicate"] | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        created_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> MemoryWriteOut:
        """Store a fact; `supersedes` (an id) or `supersede="subject_predicate"` replace older facts.

        A repeat of an active fact answers that fact with `duplicate_of` set (nothing new is stored).
        """
        return parse(MemoryWriteOut, await self._send(self._write("memory_store_fact", FactIn, locals())))

    async def memory_store_rule(
        self,
        content: str,
        *,
        importance: float | None = None,
        scope: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None,
        decay_rate: float | None = None,
        last_confirmed_at: datetime | None = None,
        supersedes: UUID | str | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        created_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> MemoryWriteOut:
        """Store a rule or learned preference (confidence defaults to 0.5)."""
        return parse(MemoryWriteOut, await self._send(self._write("memory_store_rule", RuleIn, locals())))

    async def memory_store_episode(
        self,
        content: str,
        *,
        butler: str,
        session_id: str | None = None,
        expires_at: datetime | None = None,
        importance: float | None = None,
        scope: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> MemoryWriteOut:
        """Store an episode an agent (`butler`) lived through; it expires after 7 days by default."""
        return parse(
            MemoryWriteOut, await self._send(self._write("memory_store_episode", EpisodeIn, locals()))
        )

    async def memory_store_batch(self, items: Sequence[BatchItem | Mapping[str, Any]]) -> BatchOut:
        """Store up to 1,000 facts, rules and episodes all-or-nothing (each item has a `type`)."""
        call = _core.batch_call(items, self._settings.idempotency_keys)
        return parse(BatchOut, await self._send(call))

    # Reading memories.

    async def memory_get(self, memory_id: UUID | str) -> MemoryOut:
        """One memory by id (counts as a retrieval)."""
        call = make_call("memory_get", path_params={"memory_id": memory_id})
        return parse(MemoryOut, await self._send(call))

    async def memory_history(self, memory_id: UUID | str) -> MemoryHistory:
        """How a fact changed: the memory and what it replaced or was replaced by, newest first."""
        call = make_call("memory_history", path_params={"memory_id": memory_id})
        return parse(MemoryHistory, await self._send(call))

    async def memory_list(
        self,
        type: MemoryType,
        *,
        scope: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        as_of: datetime | None = None,
    ) -> MemoryPage:
        """One page of memories of one kind, newest first; see iter_memories for all of them.

        With `as_of`, only what was valid at that time (superseded facts included).
        """
        params = {
            "type": type,
            "scope": scope,
            "limit": limit,
            "cursor": cursor,
            "as_of": _core.query_time(as_of),
        }
        return parse(MemoryPage, await self._send(make_call("memory_list", params=params)))

    async def iter_memories(
        self,
        type: MemoryType,
        *,
        scope: str | None = None,
        page_size: int = 100,
        as_of: datetime | None = None,
    ) -> AsyncIterator[MemoryOut]:
        """Every memory of one kind, newest first, fetched page by page as the iteration goes."""
        cursor: str | None = None
        while True:
            page = await self.memory_list(type, scope=scope, limit=page_size, cursor=cursor, as_of=as_of)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def memory_confirm(self, memory_id: UUID | str) -> MemoryOut:
        """Confirm a fact or rule: its confidence clock restarts now."""
        call = make_call("memory_confirm", path_params={"memory_id": memory_id})
        return parse(MemoryOut, await self._send(call))

    async def memory_forget(self, memory_id: UUID | str) -> None:
        """Delete a memory for good."""
        await self._send(make_call("memory_forget", path_params={"memory_id": memory_id}))

    # Retrieval.

    async def memory_search(
        self,
        query: str,
        *,
        limit: int | None = None,
        scope: str | None = None,
        types: Sequence[MemoryType] | None = None,
        mode: Literal["hybrid", "semantic", "keyword"] | None = None,
        fusion: Literal["adaptive", "rrf", "weighted"] | None = None,
        min_score: float | None = None,
        min_similarity: float | None = None,
        min_confidence: float | None = None,
        as_of: datetime | None = None,
        filters: SearchFilters | Mapping[str, Any] | None = None,
        weights: FusionWeights | Mapping[str, Any] | None = None,
        half_life_days: float | None = None,
        tenants: Sequence[str] | None = None,
        all_tenants: bool | None = None,
        repository: str | None = None,
        file_filter: str | None = None,
        exclude_filter: str | None = None,
        symbol: str | None = None,
        depth: int | None = None,
        exact: bool | None = None,
        rerank: bool | RerankOptions | Mapping[str, Any] | None = None,
        diversity: float | None = None,
        context_window: int | None = None,
    ) -> SearchOut:
        """Hybrid (BM25 + vector), semantic or keyword search; each result explains its score."""
        call = make_call("memory_search", json=_core.body(SearchIn, locals()))
        return parse(SearchOut, await self._send(call))

    async def memory_recall(
        self,
        topic: str,
        *,
        limit: int | None = None,
        scope: str | None = None,
        min_confidence: float | None = None,
        score_weights: RecallWeightsIn | Mapping[str, Any] | None = None,
        as_of: datetime | None = None,
        tenants: Sequence[str] | None = None,
        all_tenants: bool | None = None,
    ) -> RecallOut:
        """Facts and rules for a topic, by relevance, importance, recency and confidence."""
        call = make_call("memory_recall", json=_core.body(RecallIn, locals()))
        return parse(RecallOut, await self._send(call))

    # Scope settings.

    async def scope_settings_get(self, scope: str) -> ScopeSettings:
        """A scope's stored retrieval settings (empty when none)."""
        call = make_call("scope_settings_get", path_params={"scope": scope})
        return parse(ScopeSettings, await self._send(call))

    async def scope_settings_put(
        self, scope: str, settings: ScopeSettings | Mapping[str, Any] | str
    ) -> ScopeSettings:
        """Replace a scope's settings (admin key): a ScopeSettings, a dict, or butler.toml text."""
        call = _core.scope_settings_call(scope, settings)
        return parse(ScopeSettings, await self._send(call))

    # Markdown memory files.

    async def document_put(self, path: str, content: str, *, scope: str | None = None) -> DocumentOut:
        """Upload a markdown file; unchanged chunks keep their embeddings."""
        call = make_call("document_put", json=_core.body(DocumentIn, locals()))
        return parse(DocumentOut, await self._send(call))

    async def document_get(
        self, path: str, *, from_line: int | None = None, lines: int | None = None
    ) -> DocumentSlice:
        """The whole stored file, or `lines` lines from `from_line` (1-based)."""
        params = {"path": path, "from": from_line, "lines": lines}
        return parse(DocumentSlice, await self._send(make_call("document_get", params=params)))

    async def document_list(self) -> DocumentList:
        """Every stored file with its content hash."""
        return parse(DocumentList, await self._send(make_call("document_list")))

    async def document_delete(self, path: str) -> None:
        """Forget a file and its chunks."""
        await self._send(make_call("document_delete", params={"path": path}))

    # Code index.

    async def code_index_files(
        self, repository: str, files: Sequence[CodeFileIn | Mapping[str, Any]]
    ) -> CodeIndexOut:
        """Index source files (`{"path", "content"}` each) of a repository; unchanged files are skipped."""
        call = make_call("code_index_files", json=_core.body(CodeFilesIn, locals()))
        return parse(CodeIndexOut, await self._send(call))

    async def code_list_files(self, repository: str) -> CodeFileList:
        """Indexed files of a repository with their content hashes."""
        call = make_call("code_list_files", params={"repository": repository})
        return parse(CodeFileList, await self._send(call))

    async def code_delete_file(self, repository: str, path: str) -> None:
        """Remove a file's chunks, symbols and edges from the index."""
        await self._send(make_call("code_delete_file", params={"repository": repository, "path": path}))

    async def code_research(
        self,
        query: str | None = None,
        *,
        kind: ResearchKind | None = None,
        symbol: str | None = None,
        depth: int | None = None,
        repository: str | None = None,
    ) -> ResearchOut:
        """Structural questions: 'implementations of X', 'what calls X()', or `kind` with `symbol`."""
        call = make_call("code_research", json=_core.body(ResearchIn, locals()))
        return parse(ResearchOut, await self._send(call))

    # Export.

    async def tenant_export(self, *, with_embeddings: bool | None = None) -> list[dict[str, Any]]:
        """Every memory, document and code file of the key's tenant: the NDJSON lines, parsed, all in memory."""
        return [line async for line in self.iter_tenant_export(with_embeddings=with_embeddings)]

    async def iter_tenant_export(
        self, *, with_embeddings: bool | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The export's lines, parsed one at a time as they arrive; APIConnectionError when it was cut off."""
        call = _export.export_call(with_embeddings)
        response = await _transport.asend(self._http, self._settings, call, stream=True)
        try:
            async for line in _export.aparse_lines(response):
                yield line
        finally:
            await response.aclose()

    async def tenant_export_to(
        self, file: _export.ExportTarget, *, with_embeddings: bool | None = None
    ) -> dict[str, int]:
        """Stream the export into a file (a path, gzip if it ends in .gz, or a binary file); rows per table."""
        call = _export.export_call(with_embeddings)
        response = await _transport.asend(self._http, self._settings, call, stream=True)
        try:
            return await _export.asave(response, file)
        finally:
            await response.aclose()
