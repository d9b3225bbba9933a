"""Settings: one object, read from the environment (prefix RECALLD_) and DATABASE_URL."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.retrieval.fusion import FusionName

EmbeddingProviderName = Literal["local", "openai", "none"]
# The most fused results a reranker (and MMR) re-orders: request, scope and service settings alike.
MAX_RERANK_TOP_N = 100
RerankProviderName = Literal["none", "cross-encoder", "http"]


@dataclass(frozen=True, slots=True)
class Quota:
    """The most a tenant may store."""

    max_memories: int
    max_bytes: int


class Settings(BaseSettings):
    """Every tunable of the service; defaults give a working single-machine install."""

    model_config = SettingsConfigDict(env_prefix="RECALLD_", extra="ignore")

    data_dir: Path = Field(
        default=Path("~/.local/share/recalld"),
        description="Embedded PostgreSQL data, admin key and exported model live here.",
    )
    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "RECALLD_DATABASE_URL"),
        description="External PostgreSQL (>= 15 with pgvector >= 0.8) as the serving role (not superuser, "
        "not the schema owner, not BYPASSRLS). Unset: embedded PostgreSQL.",
    )
    migration_database_url: str | None = Field(
        default=None,
        description="The schema owner's URL for `recalld migrate` and the admin commands (tenants, keys, "
        "scopes import); defaults to DATABASE_URL. Never used by `recalld serve` except for the bootstrap.",
    )
    serving_password: str | None = Field(
        default=None,
        description="`recalld migrate` gives the serving role recalld_app this login password (external "
        "databases; the embedded one generates its own).",
    )
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "info"

    pool_min_size: int = 2
    pool_max_size: int = 10
    pool_acquire_timeout: float = Field(
        default=5.0,
        description="Seconds a request waits for a free database connection before answering 503.",
    )

    embedding_provider: EmbeddingProviderName = "local"
    embedding_backend: Literal["auto", "onnx", "torch"] = Field(
        default="auto",
        description="Runtime for the local model. auto: onnxruntime fp32, and where the CPU has AMX "
        "bfloat16 instead, queries on OpenVINO and bulk documents on torch; onnx: onnxruntime fp32 only; "
        "torch: sentence-transformers (reference).",
    )
    embedding_model: str | None = Field(
        default=None,
        description="The model's name as the `openai` endpoint serves it (unset: text-embedding-3-small); "
        "the local provider runs all-MiniLM-L6-v2 only.",
    )
    embedding_dim: int | None = Field(
        default=None,
        ge=1,
        le=4000,
        description="The model's dimension (up to 2,000 stored as vector(n), up to 4,000 as halfvec(n)). "
        "Unset: the local model's 384, or asked of the `openai` endpoint with one request at first start.",
    )
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: SecretStr | None = None
    openai_api_key_file: Path | None = Field(
        default=None,
        description="A file holding the endpoint's API key (Docker/Kubernetes secrets); read at start.",
    )
    embedding_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Seconds one `openai` embedding request may take before it is retried.",
    )
    embedding_query_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="Seconds a search waits for its query's `openai` embedding (one retry) before it "
        "answers from the keyword leg alone (`embedding_used: false`).",
    )
    embedding_max_retries: int = Field(
        default=3,
        ge=0,
        description="Retries of an `openai` embedding request after a 429, a 5xx, a timeout or a refused "
        "connection, with exponential backoff (Retry-After honoured); then searches rank by keyword "
        "alone and writes answer 503.",
    )
    embedding_send_dimensions: bool = Field(
        default=False,
        description="Send `dimensions: RECALLD_EMBEDDING_DIM` with each `openai` request, for models that "
        "shorten their vectors on request (OpenAI text-embedding-3-*).",
    )
    embedding_scripts: list[str] | None = Field(
        default=None,
        description="Scripts the embedding model reads (latin, arabic, han…; `any`: all). Unset: the "
        "local model's declaration (latin), any script for an OpenAI-compatible model. A query in "
        "another script is ranked by keyword only.",
    )
    embedding_batch_size: int = 64
    embedding_switch_batch_size: int = Field(
        default=128,
        ge=1,
        le=4096,
        description="Memories `recalld embeddings switch` re-embeds per step (one transaction; `openai`: "
        "split into requests of RECALLD_EMBEDDING_BATCH_SIZE texts).",
    )
    embedding_switch_requests_per_second: float = Field(
        default=10.0,
        ge=0,
        description="Requests per second a model switch sends to an `openai` endpoint (0: no limit); a "
        "429 or 5xx is retried with backoff, then the switch waits and tries again.",
    )
    embedding_switch_requests_in_flight: int = Field(
        default=4,
        ge=1,
        le=32,
        description="Requests a model switch keeps in flight at once to an `openai` endpoint (a step's "
        "memories in requests of RECALLD_EMBEDDING_BATCH_SIZE texts), so the endpoint's latency does "
        "not bound the rate; each still starts within RECALLD_EMBEDDING_SWITCH_REQUESTS_PER_SECOND.",
    )
    query_cache_size: int = 2048

    default_fusion: FusionName = Field(
        default="adaptive",
        description="Hybrid fusion when neither the request nor the scope names one (docs/benchmarks.md).",
    )
    rrf_k: int = 60
    semantic_weight: float = 1.0
    keyword_weight: float = 1.0
    code_semantic_weight: float = 0.7
    code_keyword_weight: float = 0.3
    weighted_vector_weight: float = 0.7
    weighted_keyword_weight: float = 0.3
    decay_half_life_days: float = 30.0
    recency_half_life_days: float = 7.0
    min_score: float = 0.1
    calibrated_min_score: float = Field(
        default=0.04,
        description="Default min_score when the score is calibrated (the default fusion with both legs): "
        "a search whose best result is below it abstains; once answered, results are kept down to "
        "min(this, half the best score).",
    )
    min_confidence: float = 0.2
    exact_scan_max_rows: int = Field(
        default=2000,
        description="Tenants with more embedded rows get their own HNSW index; smaller ones are scanned exactly.",
    )
    vector_index_check_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How often the service looks for tenants that need their HNSW index built (or dropped).",
    )
    statistics_check_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often the service compares each table's live rows with the planner's count, and "
        "runs ANALYZE where they differ by more than autovacuum tolerates: searches right after a bulk "
        "load or delete plan for the table as it is, not as it was at autovacuum's last visit.",
    )
    hnsw_ef_search: int = 100
    keyword_postings_per_lexeme: int = Field(
        default=200,
        description="BM25 reads this many best postings per query lexeme (at least twice the limit) "
        "and re-scores the best candidates exactly; 0 scores every posting (exact BM25, whose cost "
        "grows with the tenant).",
    )
    keyword_exact_max_postings: int = Field(
        default=10000,
        description="Queries whose lexemes have at most this many postings in all are scored exactly.",
    )

    mcp_allowed_origins: list[str] = Field(
        default=["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"],
        description="Browser origins allowed to call /mcp (`:*` matches any port); requests "
        "without an Origin header (agents, CLIs) are always allowed.",
    )

    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest request body (bytes) of most operations; bigger ones get 413 before auth.",
    )
    max_upload_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024,
        description="Largest body of document/code uploads, batches and /mcp (a 4 MiB file fits escaped).",
    )

    rate_limit_per_second: float = Field(
        default=50.0,
        ge=0,
        description="Requests per second each API key may average (0: no limit); over it: 429 + Retry-After.",
    )
    rate_limit_burst: int = Field(default=100, ge=1, description="Requests a key may send at once.")

    tenant_max_memories: int = Field(
        default=1_000_000,
        ge=0,
        description="Most memory rows (facts, rules, episodes, chunks) a tenant may store (0: no limit).",
    )
    tenant_max_bytes: int = Field(
        default=2 * 1024**3,
        ge=0,
        description="Most bytes of content + metadata a tenant may store (0: no limit).",
    )

    server_timing: bool = Field(
        default=False,
        description="Send per-phase Server-Timing headers on search/recall (for benchmarks; off in shared use).",
    )

    rerank_provider: RerankProviderName = Field(
        default="none",
        description="Reranker of the fused top-N: a local sentence-transformers CrossEncoder or an HTTP /rerank endpoint.",
    )
    rerank_default: bool = Field(
        default=False, description="Rerank every search unless the request or its scope says otherwise."
    )
    rerank_model_path: Path | None = Field(
        default=None, description="cross-encoder: directory of a saved CrossEncoder (nothing is downloaded)."
    )
    rerank_url: str | None = Field(
        default=None, description="http: the full URL of the endpoint, e.g. http://127.0.0.1:8081/rerank."
    )
    rerank_http_format: Literal["cohere", "tei"] = Field(
        default="cohere",
        description="http request body: cohere {model, query, documents, top_n} (Cohere, Jina, vLLM) or "
        "tei {query, texts} (Hugging Face text-embeddings-inference).",
    )
    rerank_model: str | None = Field(
        default=None, description="http: the `model` sent in cohere-format bodies."
    )
    rerank_api_key: str | None = Field(default=None, description="http: sent as `Authorization: Bearer …`.")
    rerank_top_n: int = Field(
        default=50,
        ge=1,
        le=MAX_RERANK_TOP_N,
        description="How many fused results are reranked (and MMR re-orders).",
    )
    rerank_timeout_seconds: float = Field(
        default=2.0, gt=0, description="A reranker slower than this is skipped: fused order, flagged."
    )

    @property
    def resolved_data_dir(self) -> Path:
        """Data directory with ~ expanded."""
        return self.data_dir.expanduser()

    @property
    def serving_password_path(self) -> Path:
        """The embedded database's generated login password of the serving role (mode 0600)."""
        return self.resolved_data_dir / "serving-role.password"

    @property
    def admin_key_path(self) -> Path:
        """Where the bootstrap admin key is written (mode 0600)."""
        return self.resolved_data_dir / "admin.key"

    @property
    def resolved_openai_api_key(self) -> str | None:
        """The `openai` provider's key: RECALLD_OPENAI_API_KEY, else the file RECALLD_OPENAI_API_KEY_FILE names."""
        if self.openai_api_key is not None:
            return self.openai_api_key.get_secret_value()
        if self.openai_api_key_file is not None:
            return self.openai_api_key_file.expanduser().read_text(encoding="utf-8").strip() or None
        return None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once."""
    return Settings()
