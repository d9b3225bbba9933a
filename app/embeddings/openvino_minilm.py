"""all-MiniLM-L6-v2 on OpenVINO in bfloat16, the query encoder where the CPU has AMX.

A search embeds one short query (about 11 tokens), for which onnxruntime's fp32 pass costs 3-4 ms
back to back and 6-7 ms when searches arrive with idle gaps (its ~90 MB of weights fall out of the
caches). OpenVINO runs the same exported graph with bfloat16 matrix products on the AMX tile units
(half the weight bytes) at cosine ≥ 0.9999 to sentence-transformers' fp32 output: about half the
CPU per query, and half the S1 `embed` span (docs/benchmarks.md, "Query embedding").

Each forward pass is padded to a fixed width (16, 32, 64, … tokens): OpenVINO re-prepares every
node when the input shape changes, which cost ~1 ms a query when each query had its own length,
and an AMX tile holds 16 rows anyway. Pooling ignores the padding through the attention mask; the
width depends only on the text, so a text's vector does not depend on what was embedded before.

Under concurrent searches the batches' row counts change from one pass to the next too, and each
change re-prepared the graph: 0.9 ms more per pass (1 query: 1.87 → 2.74 ms of CPU, alternating
1, 2 and 3 rows; docs). The common small shapes therefore each get a graph compiled for exactly
that shape (STATIC_SHAPES, about 51 MB of RSS each), which never re-prepares; a batch takes the
smallest one of its width with room for its rows (the spare rows repeat its first row and are
dropped), and anything else runs on the graph with dynamic shapes.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.embeddings.onnx_minilm import ONNX_FILE, TOKENIZER_FILE, MiniLMEncoder

# An AMX tile's row count: shorter inputs cost the same arithmetic.
_MIN_WIDTH = 16
# (rows, width) of the graphs compiled for one shape: the batches concurrent searches make (most
# queries fit 16 tokens, batches hold 1-7 queries at concurrency 8, 2.5 on average).
STATIC_SHAPES = ((1, 16), (2, 16), (4, 16), (1, 32), (2, 32))
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def padded_width(tokens: int, max_length: int) -> int:
    """The forward pass's width for a batch whose longest text has `tokens` tokens."""
    return min(max(_MIN_WIDTH, 1 << max(tokens - 1, 0).bit_length()), max(max_length, tokens))


def static_shape(rows: int, width: int) -> tuple[int, int] | None:
    """The smallest of STATIC_SHAPES that holds a batch of `rows` texts padded to `width`, if any."""
    return next(((r, w) for r, w in STATIC_SHAPES if w == width and r >= rows), None)


class OpenVinoMiniLM(MiniLMEncoder):
    """The exported ONNX graph compiled by OpenVINO's CPU plugin with bfloat16 inference precision.

    Tuned for one query at a time: the latency hint, one stream and one thread by default (a search's
    keyword leg runs in PostgreSQL on the other core meanwhile, and a single thread makes the
    arithmetic's order, hence the vector, independent of scheduling), and no pinning of that thread
    to a core the database may need.
    """

    def __init__(self, onnx_dir: Path, *, max_length: int = 256, threads: int = 1) -> None:
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(onnx_dir / ONNX_FILE))
        config = {
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(threads),
            "ENABLE_CPU_PINNING": "NO",
            "INFERENCE_PRECISION_HINT": "bf16",
        }
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._static: dict[tuple[int, int], tuple[ov.CompiledModel, ov.InferRequest]] = {}
        for rows, width in STATIC_SHAPES:
            shaped = model.clone()
            shaped.reshape({name: [rows, width] for name in _INPUTS})
            compiled = core.compile_model(shaped, "CPU", config)
            self._static[(rows, width)] = (compiled, compiled.create_infer_request())
        # What the plugin settled on: it keeps f32 where the CPU cannot do bfloat16.
        self.precision = str(self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())
        # One infer request holds the inputs and outputs of one pass at a time.
        self._lock = threading.Lock()
        self._max_length = max_length
        super().__init__(
            onnx_dir / TOKENIZER_FILE,
            dim=int(self._compiled.output(0).get_partial_shape()[-1].get_length()),
            max_length=max_length,
        )

    def _hidden_states(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        token_type_ids: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float32]:
        rows, width = input_ids.shape
        padded = padded_width(width, self._max_length)
        ids = np.full((rows, padded), self._pad_id, dtype=np.int64)
        ids[:, :width] = input_ids
        mask = np.zeros((rows, padded), dtype=np.int64)
        mask[:, :width] = attention_mask
        types = np.zeros((rows, padded), dtype=np.int64)
        types[:, :width] = token_type_ids
        inputs = [ids, mask, types]
        compiled, request = self._compiled, self._request
        shape = static_shape(rows, padded)
        if shape is not None:
            compiled, request = self._static[shape]
            # Spare rows repeat the first: real tokens, so no row is all padding; dropped below.
            inputs = [np.concatenate([x, np.repeat(x[:1], shape[0] - rows, axis=0)]) for x in inputs]
        with self._lock:
            result = request.infer(dict(zip(_INPUTS, inputs, strict=True)))
            hidden = np.array(result[compiled.output(0)], dtype=np.float32)
        return hidden[:rows, :width]
