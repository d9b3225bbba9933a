"""all-MiniLM-L6-v2 on onnxruntime: a one-off ONNX export of the packaged model, and a fast CPU encoder.

The encoder reproduces sentence-transformers' pipeline for this model (fast tokenizer truncated to 256
tokens, mean pooling over the attention mask, L2 normalisation) at roughly a third of torch's fp32
latency; app.embeddings.torch_minilm runs the same pipeline on torch in bfloat16 where the CPU has AMX.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MARKER_FILE = "model.onnx.source"

_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
_OUTPUT_NAME = "last_hidden_state"
_OPSET = 17
# Part of the marker, so changing how the graph is exported invalidates earlier exports.
_EXPORT_FORMAT = f"torchscript-opset{_OPSET}"
_BATCH_SIZE = 32


def _source_id(model_dir: Path) -> str:
    digest = hashlib.sha256()
    with (model_dir / "model.safetensors").open("rb") as weights:
        for chunk in iter(lambda: weights.read(1 << 20), b""):
            digest.update(chunk)
    return f"{_EXPORT_FORMAT} sha256={digest.hexdigest()}\n"


def _replace_atomically(dest: Path, write: Callable[[Path], object]) -> None:
    # A private temp file in the destination directory keeps os.replace a same-filesystem rename, so a
    # concurrent exporter or reader only ever sees the old complete file or the new complete one.
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _export_graph(model_dir: Path, dest: Path) -> None:
    # Imported here so that serving an existing export never pays for loading torch.
    import torch
    from transformers import AutoModel

    class _LastHiddenState(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
        ) -> torch.Tensor:
            output = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            hidden: torch.Tensor = output.last_hidden_state
            return hidden

    model = _LastHiddenState(AutoModel.from_pretrained(str(model_dir), local_files_only=True))
    # The exporter restores the wrapper's training mode afterwards; eval() here keeps dropout out of the trace.
    model.eval()
    # One padded row so the traced graph carries the attention-mask path real batches take.
    input_ids = torch.tensor([[101, 7592, 2088, 102, 0, 0], [101, 7592, 2088, 2003, 2204, 102]])
    attention_mask = (input_ids != 0).to(torch.int64)
    token_type_ids = torch.zeros_like(input_ids)
    dynamic = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), torch.no_grad():
        # The legacy TorchScript exporter is used because the dynamo one needs onnxscript, which is not
        # installed; its tracer warnings are about shape checks that are constant for this encoder.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (input_ids, attention_mask, token_type_ids),
            str(dest),
            input_names=list(_INPUT_NAMES),
            output_names=[_OUTPUT_NAME],
            dynamic_axes={name: dynamic for name in (*_INPUT_NAMES, _OUTPUT_NAME)},
            opset_version=_OPSET,
            dynamo=False,
        )


def export_is_current(model_dir: Path, target: Path) -> bool:
    """Whether target holds a complete export of this model in this export format."""
    marker = target / MARKER_FILE
    return (
        (target / ONNX_FILE).is_file()
        and (target / TOKENIZER_FILE).is_file()
        and marker.is_file()
        and marker.read_text(encoding="utf-8") == _source_id(model_dir)
    )


def export_minilm_onnx(model_dir: Path, target: Path) -> Path:
    """Export the packaged MiniLM to target/model.onnx (with its tokenizer) unless already done; return it."""
    onnx_path = target / ONNX_FILE
    tokenizer_path = target / TOKENIZER_FILE
    marker = target / MARKER_FILE
    if export_is_current(model_dir, target):
        return onnx_path
    source = _source_id(model_dir)
    target.mkdir(parents=True, exist_ok=True)
    _replace_atomically(onnx_path, lambda tmp: _export_graph(model_dir, tmp))
    _replace_atomically(tokenizer_path, lambda tmp: shutil.copyfile(model_dir / TOKENIZER_FILE, tmp))
    # Written last: a marker that matches vouches for both files above.
    _replace_atomically(marker, lambda tmp: tmp.write_text(source, encoding="utf-8"))
    return onnx_path


class MiniLMEncoder:
    """sentence-transformers' pipeline for this model around any runtime's forward pass.

    The fast tokenizer truncates at 256 tokens (special tokens included); texts are sorted by token
    count and batched, each batch padded only to its own longest text, so little arithmetic is spent
    on padding that pooling then discards; mean pooling over the attention mask; L2 normalisation.
    """

    dim: int

    def __init__(self, tokenizer_file: Path, *, dim: int, max_length: int = 256) -> None:
        self.dim = dim
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        # tokenizer.json ships fixed 128-token padding and truncation; padding is done per batch below.
        self._tokenizer.enable_truncation(max_length)
        self._tokenizer.no_padding()
        self._pad_id = self._tokenizer.token_to_id("[PAD]")

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts as L2-normalised mean-pooled vectors, one row per text in input order."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch_fast(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), _BATCH_SIZE):
            rows = order[start : start + _BATCH_SIZE]
            out[rows] = self._encode_batch([encodings[i].ids for i in rows])
        return out

    def _encode_batch(self, token_ids: list[list[int]]) -> npt.NDArray[np.float32]:
        width = max(len(ids) for ids in token_ids)
        input_ids = np.full((len(token_ids), width), self._pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(token_ids), width), dtype=np.int64)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        hidden = self._hidden_states(input_ids, attention_mask, np.zeros_like(input_ids))
        mask = attention_mask[:, :, None].astype(np.float32)
        # Same clamps as sentence-transformers' Pooling (1e-9) and Normalize (1e-12) modules.
        summed = (np.asarray(hidden, dtype=np.float32) * mask).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)

    def _hidden_states(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        token_type_ids: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float32]:
        raise NotImplementedError


class OnnxMiniLM(MiniLMEncoder):
    """Sentence embeddings from an exported all-MiniLM-L6-v2 on onnxruntime, in fp32."""

    def __init__(self, onnx_dir: Path, *, max_length: int = 256, threads: int | None = None) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle ORT threads spin by default; on a 2-core box that steals the core PostgreSQL and the
        # event loop need, and made a 2-thread query embedding slower than 1 thread under load.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(onnx_dir / ONNX_FILE), options, providers=["CPUExecutionProvider"]
        )
        super().__init__(
            onnx_dir / TOKENIZER_FILE,
            dim=int(self._session.get_outputs()[0].shape[-1]),
            max_length=max_length,
        )

    def _hidden_states(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        token_type_ids: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float32]:
        (hidden,) = self._session.run(
            [_OUTPUT_NAME],
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids},
        )
        return np.asarray(hidden, dtype=np.float32)


if __name__ == "__main__":
    # `python -m app.embeddings.onnx_minilm MODEL_DIR TARGET`: the export in a process of its own
    # (app.embeddings.factory), so torch never loads into the server.
    import sys

    export_minilm_onnx(Path(sys.argv[1]), Path(sys.argv[2]))
