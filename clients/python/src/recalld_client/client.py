"""Client: one blocking method per recalld operation, named like the operation ids and MCP tools."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


class Client:
    """A blocking recalld client: `Client("http://127.0.0.1:8080", "rk_...")`.

    429 and 503 answers are retried after their Retry-After (at most `max_retries` times, each wait
    at most `max_retry_wait` seconds), as are connections that could not be made. Every write of a
    fact, rule or episode carries an idempotency key (unless `idempotency_keys=False`), so a retried
    write is stored once. Errors raise `recalld_client.APIError` subclasses. Without arguments the
    URL and key come from RECALLD_URL and RECALLD_API_KEY.
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
        http_client: httpx.Client | None = None,
    ) -> None:
        self._settings = _core.Settings.build(
            base_url, api_key, timeout, max_retries, max_retry_wait, idempotency_keys
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)

    @property
    def base_url(self) -> str:
        """The server's URL."""
        return self._settings.base_url

    @property
    def api_key(self) -> str | None:
        """The API key sent as the bearer token."""
        return self._settings.api_key

    def close(self) -> None:
        """Close the connection pool (not an `http_client` passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, call: Call) -> httpx.Response:
        return _transport.send(self._http, self._settings, call)

    def _write(self, operation: str, model: type[BaseModel], values: Mapping[str, Any]) -> Call:
        return _core.write_call(operation, _core.body(model, values), self._settings.idempotency_keys)

    # Health (no key needed).

    def healthz(self) -> dict[str, Any]:
        """Liveness: the process answers."""
        result: dict[str, Any] = self._send(make_call("healthz")).json()
        return result

    def readyz(self) -> dict[str, Any]:
        """Readiness: database, migrations, embedder and keyword ranker checks."""
        result: dict[str, Any] = self._send(make_call("readyz")).json()
        return result

    def metrics(self) -> str:
        """Prometheus metrics text."""
        return self._send(make_call("metrics")).text

    # Memory writes.

    def memory_store_fact(
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
        return parse(MemoryWriteOut, self._send(self._write("memory_store_fact", FactIn, locals())))

    def memory_store_rule(
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
        return parse(MemoryWriteOut, self._send(self._write("memory_store_rule", RuleIn, locals())))

    def memory_store_episode(
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
        return parse(MemoryWriteOut, self._send(self._write("memory_store_episode", EpisodeIn, locals())))

    def memory_store_batch(self, items: Sequence[BatchItem | Mapping[str, Any]]) -> BatchOut:
        """Store up to 1,000 facts, rules and episodes all-or-nothing (each item has a `type`)."""
        call = _core.batch_call(items, self._settings.idempotency_keys)
        return parse(BatchOut, self._send(call))

    # Reading memories.

    def memory_get(self, memory_id: UUID | str) -> MemoryOut:
        """One memory by id (counts as a retrieval)."""
        call = make_call("memory_get", path_params={"memory_id": memory_id})
        return parse(MemoryOut, self._send(call))

    def memory_history(self, memory_id: UUID | str) -> MemoryHistory:
        """How a fact changed: the memory and what it replaced or was replaced by, newest first."""
        call = make_call("memory_history", path_params={"memory_id": memory_id})
        return parse(MemoryHistory, self._send(call))

    def memory_list(
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
        return parse(MemoryPage, self._send(make_call("memory_list", params=params)))

    def iter_memories(
        self,
        type: MemoryType,
        *,
        scope: str | None = None,
        page_size: int = 100,
        as_of: datetime | None = None,
    ) -> Iterator[MemoryOut]:
        """Every memory of one kind, newest first, fetched page by page as the iteration goes."""
        cursor: str | None = None
        while True:
            page = self.memory_list(type, scope=scope, limit=page_size, cursor=cursor, as_of=as_of)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def memory_confirm(self, memory_id: UUID | str) -> MemoryOut:
        """Confirm a fact or rule: its confidence clock restarts now."""
        call = make_call("memory_confirm", path_params={"memory_id": memory_id})
        return parse(MemoryOut, self._send(call))

    def memory_forget(self, memory_id: UUID | str) -> None:
        """Delete a memory for good."""
        self._send(make_call("memory_forget", path_params={"memory_id": memory_id}))

    # Retrieval.

    def memory_search(
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
        return parse(SearchOut, self._send(call))

    def memory_recall(
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
        return parse(RecallOut, self._send(call))

    # Scope settings.

    def scope_settings_get(self, scope: str) -> ScopeSettings:
        """A scope's stored retrieval settings (empty when none)."""
        call = make_call("scope_settings_get", path_params={"scope": scope})
        return parse(ScopeSettings, self._send(call))

    def scope_settings_put(
        self, scope: str, settings: ScopeSettings | Mapping[str, Any] | str
    ) -> ScopeSettings:
        """Replace a scope's settings (admin key): a ScopeSettings, a dict, or butler.toml text."""
        call = _core.scope_settings_call(scope, settings)
        return parse(ScopeSettings, self._send(call))

    # Markdown memory files.

    def document_put(self, path: str, content: str, *, scope: str | None = None) -> DocumentOut:
        """Upload a markdown file; unchanged chunks keep their embeddings."""
        call = make_call("document_put", json=_core.body(DocumentIn, locals()))
        return parse(DocumentOut, self._send(call))

    def document_get(
        self, path: str, *, from_line: int | None = None, lines: int | None = None
    ) -> DocumentSlice:
        """The whole stored file, or `lines` lines from `from_line` (1-based)."""
        params = {"path": path, "from": from_line, "lines": lines}
        return parse(DocumentSlice, self._send(make_call("document_get", params=params)))

    def document_list(self) -> DocumentList:
        """Every stored file with its content hash."""
        return parse(DocumentList, self._send(make_call("document_list")))

    def document_delete(self, path: str) -> None:
        """Forget a file and its chunks."""
        self._send(make_call("document_delete", params={"path": path}))

    # Code index.

    def code_index_files(
        self, repository: str, files: Sequence[CodeFileIn | Mapping[str, Any]]
    ) -> CodeIndexOut:
        """Index source files (`{"path", "content"}` each) of a repository; unchanged files are skipped."""
        call = make_call("code_index_files", json=_core.body(CodeFilesIn, locals()))
        return parse(CodeIndexOut, self._send(call))

    def code_list_files(self, repository: str) -> CodeFileList:
        """Indexed files of a repository with their content hashes."""
        call = make_call("code_list_files", params={"repository": repository})
        return parse(CodeFileList, self._send(call))

    def code_delete_file(self, repository: str, path: str) -> None:
        """Remove a file's chunks, symbols and edges from the index."""
        self._send(make_call("code_delete_file", params={"repository": repository, "path": path}))

    def code_research(
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
        return parse(ResearchOut, self._send(call))

    # Export.

    def tenant_export(self, *, with_embeddings: bool | None = None) -> list[dict[str, Any]]:
        """Every memory, document and code file of the key's tenant: the NDJSON lines, parsed, all in memory."""
        return list(self.iter_tenant_export(with_embeddings=with_embeddings))

    def iter_tenant_export(self, *, with_embeddings: bool | None = None) -> Iterator[dict[str, Any]]:
        """The export's lines, parsed one at a time as they arrive; APIConnectionError when it was cut off."""
        call = _export.export_call(with_embeddings)
        response = _transport.send(self._http, self._settings, call, stream=True)
        try:
            yield from _export.parse_lines(response)
        finally:
            response.close()

    def tenant_export_to(
        self, file: _export.ExportTarget, *, with_embeddings: bool | None = None
    ) -> dict[str, int]:
        """Stream the export into a file (a path, gzip if it ends in .gz, or a binary file); rows per table."""
        call = _export.export_call(with_embeddings)
        response = _transport.send(self._http, self._settings, call, stream=True)
        try:
            return _export.save(response, file)
        finally:
            response.close()
