"""all-MiniLM-L6-v2 on torch with bfloat16 matrix products, for CPUs whose AMX units make that fast.

On a CPU with AMX (Intel Sapphire Rapids and later) oneDNN runs bfloat16 matrix products on the tile
units at several times the fp32 rate; autocast keeps layer norms, softmax and the pooling in fp32, so
the vectors stay within cosine 0.9999 of sentence-transformers' fp32 output (docs/benchmarks.md). On
CPUs without AMX the same arithmetic is emulated or slower than onnxruntime's fp32, so the factory
only picks this encoder where `bf16_is_fast()` says so.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.embeddings.onnx_minilm import TOKENIZER_FILE, MiniLMEncoder

log = logging.getLogger("recalld.embeddings")

CPUINFO = Path("/proc/cpuinfo")
# amx_bf16 is what the speed comes from; avx512_bf16 alone (Cooper Lake, Zen 4) was not measured here.
_REQUIRED_FLAGS = frozenset({"amx_bf16", "amx_tile"})


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The instruction-set flags the kernel reports for the first CPU (empty where it cannot be read)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def bf16_is_fast(flags: frozenset[str] | None = None) -> bool:
    """True where the CPU reports AMX bfloat16 tiles."""
    return (cpu_flags() if flags is None else flags) >= _REQUIRED_FLAGS


class TorchBf16MiniLM(MiniLMEncoder):
    """The packaged model run by transformers under CPU autocast to bfloat16."""

    def __init__(self, model_dir: Path, *, max_length: int = 256, threads: int | None = None) -> None:
        # GNU OpenMP's idle threads spin by default, taking the core PostgreSQL and the event loop need
        # between batches (the same reason onnxruntime's spinning is off); only read before torch loads.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import torch
        from transformers import AutoModel

        self._torch = torch
        if threads:
            torch.set_num_threads(threads)
        self._model = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
        self._model.eval()
        super().__init__(
            model_dir / TOKENIZER_FILE, dim=int(self._model.config.hidden_size), max_length=max_length
        )

    def _hidden_states(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        token_type_ids: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float32]:
        torch = self._torch
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            output = self._model(
                input_ids=torch.from_numpy(input_ids),
                attention_mask=torch.from_numpy(attention_mask),
                token_type_ids=torch.from_numpy(token_type_ids),
            )
        hidden: npt.NDArray[np.float32] = output.last_hidden_state.float().numpy()
        return hidden


class LazyBf16Encoder:
    """onnxruntime's fp32 encoder until the bf16 one has loaded, which the first call starts.

    Loading torch and transformers costs several seconds and about 700 MB of memory
    (docs/benchmarks.md): a server that never stores documents never pays it, and the first bulk
    write does not wait for it but is embedded in fp32 meanwhile.
    """

    def __init__(self, model_dir: Path, fallback: Callable[[Sequence[str]], npt.NDArray[np.float32]]) -> None:
        self._model_dir = model_dir
        self._fallback = fallback
        self._fast: TorchBf16MiniLM | None = None
        self._lock = threading.Lock()
        self._started = False
        self.loaded = threading.Event()

    def start(self) -> None:
        """Begin loading in a background thread (once)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._load, name="embedder-bf16-load", daemon=True).start()

    def _load(self) -> None:
        try:
            self._fast = TorchBf16MiniLM(self._model_dir)
        except Exception:
            log.exception("bf16 encoder failed to load; documents stay on onnxruntime fp32")
        finally:
            self.loaded.set()

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed with bf16 once loaded, else with the fallback (starting the load)."""
        fast = self._fast
        if fast is not None:
            return fast.encode(texts)
        self.start()
        return self._fallback(texts)
