"""TEST DOUBLE: an OpenAI-compatible `/v1/embeddings` server with deterministic vectors of any dimension.

Not a language model. Each text becomes the sum of one pseudo-random unit vector per lowercase
word (seeded by the word's hash), so texts that share words are near each other: enough for tests
about storage, dimensions, retries and outages, never for tests about semantics (those use the real
MiniLM). It speaks real HTTP on 127.0.0.1, so the provider's client, timeouts and retries run for real.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import numpy.typing as npt

_WORD = re.compile(r"\w+", re.UNICODE)


@functools.lru_cache(maxsize=65536)
def _word_vector(word: str, dim: int) -> npt.NDArray[np.float64]:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dim)
    return v / np.linalg.norm(v)


def stub_vector(text: str, dim: int) -> list[float]:
    """The stand-in's vector of text: a sum of per-word pseudo-random unit vectors, L2-normalised."""
    total = np.zeros(dim, dtype=np.float64)
    for word in _WORD.findall(text.lower()) or [""]:
        # Cached: in a benchmark (app.cli.switch_bench) the stand-in shares the process with recalld.
        total += _word_vector(word, dim)
    norm = np.linalg.norm(total)
    return [float(x) for x in (total / norm if norm > 0 else total)]


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass
class StubState:
    """What the stand-in serves and what it saw; tests change it while it runs."""

    dim: int
    latency_seconds: float = 0.0
    # Requests wait while this is clear: a test holds a request in flight for as long as it needs.
    gate: threading.Event = field(default_factory=lambda: _set_event())
    # Answer this status to the next `failures` requests (then serve normally); -1: always.
    failure_status: int = 503
    failures: int = 0
    retry_after: str | None = None
    # Answer failure_status to a request holding a text never asked before (then serve it): a
    # flaky endpoint whose second try of the same texts succeeds.
    fail_unseen: bool = False
    seen: set[str] = field(default_factory=set)
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    state: StubState

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        state = self.state
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        with state.lock:
            state.requests.append(body)
            state.authorizations.append(self.headers.get("Authorization"))
            failing = state.failures != 0 or (state.fail_unseen and not state.seen.issuperset(texts))
            state.seen.update(texts)
            if state.failures > 0:
                state.failures -= 1
        state.gate.wait()
        if state.latency_seconds:
            time.sleep(state.latency_seconds)
        if self.path.rstrip("/") != "/v1/embeddings":
            self._send(404, {"error": {"message": "not found"}})
            return
        if failing:
            self._send(state.failure_status, {"error": {"message": "stub outage"}}, state.retry_after)
            return
        dim = int(body.get("dimensions") or state.dim)
        data = [
            {"object": "embedding", "index": i, "embedding": stub_vector(t, dim)} for i, t in enumerate(texts)
        ]
        self._send(200, {"object": "list", "data": data, "model": body.get("model")})

    def _send(self, status: int, payload: dict[str, Any], retry_after: str | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.end_headers()
        self.wfile.write(raw)


@contextmanager
def embedding_stub(dim: int, **options: Any) -> Iterator[tuple[str, StubState]]:
    """Run the stand-in on a free port; yields (base URL ending in /v1, its state)."""
    state = StubState(dim=dim, **options)
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()
