"""Reranking of the fused top-N over HTTP: contract tests, not quality.

No cross-encoder weights can be installed here, so these tests check the contract only: with a
tiny CrossEncoder of random weights that the test builds and saves itself, and with a stub
/rerank endpoint (a real local HTTP server) whose scores reverse the fused order, the results
follow the reranker; a reranker that fails or is too slow leaves the fused order, flagged, 200.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import uvicorn

from app.infra.config import Settings
from app.rerank.base import Reranker
from app.rerank.cross_encoder import CrossEncoderReranker
from app.rerank.factory import RerankConfigError, build_reranker
from app.rerank.http import HttpReranker
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys, search

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SLOW_SECONDS = 3.0
FACTS = (
    "The garden fence is painted green every spring",
    "The fence between the gardens leans after storms",
    "A new garden fence costs about four hundred pounds",
    "The neighbours asked about the fence height",
    "Fence posts rot where the garden stays wet",
)


class StubRerankServer:
    """A /rerank endpoint on localhost whose scores reverse the order it is sent (labelled stub)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", interface="asgi3"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def url(self, kind: str) -> str:
        """URL of one behaviour: tei, cohere, fail, slow or garbage."""
        return f"http://127.0.0.1:{self.port}/{kind}/rerank"

    async def app(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        self.bodies.append(body)
        kind = scope["path"].split("/")[1]
        status, answer = 200, cast(Any, None)
        if kind == "tei":
            answer = sorted(
                ({"index": i, "score": float(i)} for i in range(len(body["texts"]))),
                key=lambda r: -r["score"],
            )
        elif kind in ("cohere", "slow"):
            if kind == "slow":
                await asyncio.sleep(SLOW_SECONDS)
            n = len(body["documents"])
            answer = {"results": [{"index": i, "relevance_score": (i + 1) / n} for i in reversed(range(n))]}
        elif kind == "garbage":
            answer = {"results": [{"index": 0, "relevance_score": "high"}]}
        else:
            status, answer = 500, {"error": "model crashed"}
        payload = json.dumps(answer).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def __enter__(self) -> StubRerankServer:
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            threading.Event().wait(0.02)
        raise RuntimeError("stub rerank server did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def stub() -> Iterator[StubRerankServer]:
    with StubRerankServer() as server:
        yield server


@pytest.fixture
async def use_reranker(service: ServiceState) -> AsyncIterator[Callable[[Reranker | None], None]]:
    """Swap the running service's reranker for one test, restoring it (and its settings) afterwards."""
    original, settings = service.reranker, service.settings
    installed: list[Reranker] = []

    def install(reranker: Reranker | None) -> None:
        if reranker is not None:
            installed.append(reranker)
        service.reranker = reranker

    yield install
    service.reranker, service.settings = original, settings
    for reranker in installed:
        await reranker.close()


def _http(url: str, fmt: str = "tei", timeout: float = 2.0) -> HttpReranker:
    return HttpReranker(
        url, fmt="tei" if fmt == "tei" else "cohere", model="stub", api_key=None, timeout=timeout
    )


async def _store_facts(client: httpx.AsyncClient, tenant: TenantKeys, scope: str = "global") -> None:
    response = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": text, "scope": scope} for text in FACTS]},
        headers=tenant.headers(),
    )
    assert response.status_code == 201, response.text


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> dict[str, Any]:
    return await search(client, tenant, **{"query": "garden fence", "min_score": 0, **body})


def _ids(result: dict[str, Any]) -> list[str]:
    return [r["id"] for r in result["results"]]


async def test_http_reranker_reorders_the_fused_top_n(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    stub: StubRerankServer,
    use_reranker: Callable[[Reranker | None], None],
) -> None:
    """Stub endpoint (TEI shape) scoring the reverse of the fused order: results come reversed."""
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    fused = await _search(client, tenant)
    assert len(fused["results"]) == len(FACTS)
    assert "rerank" not in fused and all("rerank" not in r["score_breakdown"] for r in fused["results"])

    use_reranker(_http(stub.url("tei")))
    reranked = await _search(client, tenant, rerank=True)
    assert _ids(reranked) == list(reversed(_ids(fused)))
    assert reranked["rerank"] == {"applied": True, "provider": "http", "top_n": len(FACTS), "error": None}
    assert stub.bodies[-1]["query"] == "garden fence"
    assert stub.bodies[-1]["texts"] == [r["content"] for r in fused["results"]]
    first = reranked["results"][0]["score_breakdown"]["rerank"]
    assert first == {"score": float(len(FACTS) - 1), "rank": 1}
    # The fused score is kept: the reranker only re-orders.
    fused_scores = {r["id"]: r["score"] for r in fused["results"]}
    assert all(r["score"] == fused_scores[r["id"]] for r in reranked["results"])


async def test_cohere_shape_and_top_n_rerank_only_the_head(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    stub: StubRerankServer,
    use_reranker: Callable[[Reranker | None], None],
) -> None:
    """Stub endpoint (Cohere/Jina shape), top_n 3: the first three reversed, the rest in fused order."""
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    fused = _ids(await _search(client, tenant))
    use_reranker(_http(stub.url("cohere"), fmt="cohere"))
    result = await _search(client, tenant, rerank={"top_n": 3})
    assert _ids(result) == [fused[2], fused[1], fused[0], *fused[3:]]
    assert stub.bodies[-1]["model"] == "stub" and stub.bodies[-1]["top_n"] == 3
    assert len(stub.bodies[-1]["documents"]) == 3
    assert result["rerank"]["applied"] is True and result["rerank"]["top_n"] == 3
    assert [("rerank" in r["score_breakdown"]) for r in result["results"]] == [True] * 3 + [False] * 2


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("fail", "http 500"),
        ("slow", "timeout"),
        ("garbage", "invalid response: result 0 has no numeric score"),
    ],
)
async def test_failing_or_slow_reranker_returns_the_fused_order_flagged(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    stub: StubRerankServer,
    use_reranker: Callable[[Reranker | None], None],
    kind: str,
    error: str,
) -> None:
    """Stub endpoint answering 500, nonsense, or sleeping past the timeout: 200, fused order, flag."""
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    fused = _ids(await _search(client, tenant))
    service.settings = service.settings.model_copy(update={"rerank_timeout_seconds": 0.5})
    use_reranker(_http(stub.url(kind), fmt="cohere", timeout=SLOW_SECONDS * 2))
    result = await _search(client, tenant, rerank=True)
    assert _ids(result) == fused
    assert result["rerank"] == {"applied": False, "provider": "http", "top_n": len(FACTS), "error": error}
    assert all("rerank" not in r["score_breakdown"] for r in result["results"])


async def test_rerank_without_a_configured_reranker_is_flagged_not_an_error(
    client: httpx.AsyncClient, make_tenant: TenantFactory, use_reranker: Callable[[Reranker | None], None]
) -> None:
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    fused = _ids(await _search(client, tenant))
    use_reranker(None)
    result = await _search(client, tenant, rerank=True)
    assert _ids(result) == fused
    assert result["rerank"] == {
        "applied": False,
        "provider": None,
        "top_n": len(FACTS),
        "error": "no reranker configured",
    }


async def test_rerank_on_by_scope_setting_and_by_service_setting(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    stub: StubRerankServer,
    use_reranker: Callable[[Reranker | None], None],
) -> None:
    """Stub endpoint: a scope's `rerank` turns it on for that scope; a request can still turn it off."""
    tenant = await make_tenant()
    await _store_facts(client, tenant, scope="garden")
    use_reranker(_http(stub.url("tei")))
    fused = _ids(await _search(client, tenant, scope="garden"))
    response = await client.put(
        "/v1/scopes/garden/settings",
        json={"rerank": True, "rerank_top_n": 2},
        headers=tenant.headers("admin"),
    )
    assert response.status_code == 200, response.text
    by_scope = await _search(client, tenant, scope="garden")
    assert _ids(by_scope) == [fused[1], fused[0], *fused[2:]]
    assert by_scope["rerank"]["top_n"] == 2
    assert _ids(await _search(client, tenant, scope="garden", rerank=False)) == fused
    # Other scopes are untouched by the garden's settings; the service setting turns it on everywhere.
    assert "rerank" not in await _search(client, tenant)
    service.settings = service.settings.model_copy(update={"rerank_default": True})
    everywhere = await _search(client, tenant)
    assert everywhere["rerank"]["applied"] is True
    assert _ids(everywhere) == list(reversed(_ids(await _search(client, tenant, rerank=False))))


@pytest.mark.parametrize(
    "body",
    [
        {"rerank": {"top_n": 101}},
        {"rerank": {"top_n": 0}},
        {"rerank": "yes"},
        {"rerank": {"depth": 5}},
        {"diversity": 1.5},
        {"diversity": -0.1},
        {"context_window": 11},
    ],
)
async def test_invalid_rerank_diversity_and_context_fields_are_422(
    client: httpx.AsyncClient, make_tenant: TenantFactory, body: dict[str, Any]
) -> None:
    tenant = await make_tenant()
    response = await client.post(
        "/v1/search", json={"query": "fence", **body}, headers=tenant.headers("reader")
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


def _build_tiny_cross_encoder(target: Path) -> None:
    """A 1-layer BERT with random weights and a word-level vocabulary: a contract fixture, not a model."""
    import transformers

    words = sorted({w.lower() for text in (*FACTS, "garden fence") for w in text.split()})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = transformers.BertTokenizerFast(  # type: ignore[attr-defined]
        vocab={token: i for i, token in enumerate(tokens)}
    )
    assert "[UNK]" not in tokenizer.tokenize(FACTS[0])
    config = transformers.BertConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    config.num_labels = 1
    import torch

    torch.manual_seed(7)
    transformers.BertForSequenceClassification(config).save_pretrained(target / "model")
    tokenizer.save_pretrained(target / "model")


async def test_local_cross_encoder_orders_results_by_its_scores(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    tmp_path: Path,
    use_reranker: Callable[[Reranker | None], None],
) -> None:
    """Tiny random CrossEncoder built by the test (contract, not quality): results follow its scores."""
    _build_tiny_cross_encoder(tmp_path)
    reranker = build_reranker(Settings(rerank_provider="cross-encoder", rerank_model_path=tmp_path / "model"))
    assert isinstance(reranker, CrossEncoderReranker)
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    fused = await _search(client, tenant)
    use_reranker(reranker)
    result = await _search(client, tenant, rerank=True)
    contents = [r["content"] for r in fused["results"]]
    scores = await reranker.score("garden fence", contents)
    expected = [c for _, c in sorted(zip(scores, contents, strict=True), key=lambda p: -p[0])]
    assert [r["content"] for r in result["results"]] == expected
    assert result["rerank"]["applied"] is True and result["rerank"]["provider"] == "cross-encoder"
    assert [r["score_breakdown"]["rerank"]["rank"] for r in result["results"]] == [1, 2, 3, 4, 5]
    assert len(set(scores)) == len(scores)  # distinct scores, so the expected order is unambiguous


async def test_reranker_settings_are_checked_at_startup(tmp_path: Path) -> None:
    assert build_reranker(Settings()) is None
    with pytest.raises(RerankConfigError, match="RECALLD_RERANK_MODEL_PATH"):
        build_reranker(Settings(rerank_provider="cross-encoder"))
    with pytest.raises(RerankConfigError, match="RECALLD_RERANK_URL"):
        build_reranker(Settings(rerank_provider="http"))
    with pytest.raises(FileNotFoundError):
        build_reranker(Settings(rerank_provider="cross-encoder", rerank_model_path=tmp_path / "missing"))
    http = build_reranker(Settings(rerank_provider="http", rerank_url="http://127.0.0.1:9/rerank"))
    assert isinstance(http, HttpReranker)
    await http.close()


async def test_searches_waiting_for_a_slow_reranker_hold_no_connection(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    settings: Settings,
    stub: StubRerankServer,
    use_reranker: Callable[[Reranker | None], None],
) -> None:
    """As many reranked searches as the pool has connections, all waiting: another tenant still searches."""
    tenant, other = await make_tenant(), await make_tenant()
    await _store_facts(client, tenant)
    await _store_facts(client, other)
    service.settings = service.settings.model_copy(update={"rerank_timeout_seconds": SLOW_SECONDS * 2})
    use_reranker(_http(stub.url("slow"), fmt="cohere", timeout=SLOW_SECONDS * 2))
    sent = len(stub.bodies)
    waiting = [
        asyncio.create_task(_search(client, tenant, rerank=True)) for _ in range(settings.pool_max_size)
    ]
    # Every reranked search is inside the endpoint's sleep before the other tenant asks.
    for _ in range(200):
        if len(stub.bodies) - sent == len(waiting):
            break
        await asyncio.sleep(0.01)
    assert len(stub.bodies) - sent == len(waiting)
    plain = await asyncio.wait_for(_search(client, other, mode="keyword"), timeout=SLOW_SECONDS / 2)
    assert len(plain["results"]) == len(FACTS)
    reranked = await asyncio.gather(*waiting)
    # The endpoint reverses what it is sent: each waiting search came back reranked, and complete.
    assert all(r["rerank"]["applied"] for r in reranked)
    assert all(len(r["results"]) == len(FACTS) for r in reranked)
