"""A sentence-transformers CrossEncoder loaded from a local directory, run on its own thread."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


class CrossEncoderReranker:
    """Scores pairs with a local CrossEncoder off the event loop.

    One worker thread owns the model: on a small machine a second would only contend, and a
    prediction abandoned at the timeout finishes there instead of piling up threads.
    """

    name = "cross-encoder"

    def __init__(self, model_path: Path, *, batch_size: int = 32) -> None:
        from sentence_transformers import CrossEncoder

        if not model_path.is_dir():
            raise FileNotFoundError(f"cross-encoder model directory {model_path} does not exist")
        self._model = CrossEncoder(str(model_path), device="cpu", local_files_only=True)
        self._batch_size = batch_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reranker")

    def _predict(self, query: str, texts: Sequence[str]) -> list[float]:
        scores = self._model.predict(
            [(query, text) for text in texts], batch_size=self._batch_size, show_progress_bar=False
        )
        return [float(s) for s in np.asarray(scores, dtype=np.float64).reshape(len(texts))]

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text (the model's own scale; sigmoid for single-label models)."""
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._predict, query, list(texts))

    async def close(self) -> None:
        """Stop the worker thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)
