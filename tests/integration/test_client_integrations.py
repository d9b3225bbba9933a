"""The LangChain and LlamaIndex retrievers of recalld-client, with the real libraries, against a live server.

Keyword-only server (not about semantics: each query shares a word with the memory it finds).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from llama_index.core.schema import MetadataMode

from app.infra.config import Settings
from recalld_client import AsyncClient, Client
from recalld_client.langchain import RecalldRetriever as LangChainRetriever
from recalld_client.llama_index import RecalldRetriever as LlamaIndexRetriever
from recalld_client.models import MemoryOut
from tests.integration.test_client import serving
from tests.support import TenantFactory, TenantKeys

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_url(settings: Settings, app: FastAPI) -> Iterator[str]:
    with serving(settings, rate_limit_per_second=0) as url:
        yield url


@pytest.fixture
async def tenant(make_tenant: TenantFactory) -> TenantKeys:
    return await make_tenant("retriever")


@pytest.fixture
def stored(base_url: str, tenant: TenantKeys) -> MemoryOut:
    with Client(base_url, tenant.writer) as recalld:
        recalld.memory_store_rule(content="Always answer in British English", scope="style")
        return recalld.memory_store_fact(
            content="The user is lactose intolerant",
            subject="user",
            scope="health",
            tags=["diet"],
            metadata={"source": "onboarding"},
        )


def test_langchain_retriever_invoke_returns_content_score_and_metadata(
    base_url: str, tenant: TenantKeys, stored: MemoryOut
) -> None:
    retriever = LangChainRetriever(base_url=base_url, api_key=tenant.reader)
    docs = retriever.invoke("is the user lactose intolerant")
    assert [d.page_content for d in docs] == ["The user is lactose intolerant"]
    doc = docs[0]
    assert doc.id == str(stored.id) and doc.metadata["id"] == str(stored.id)
    assert 0 < doc.metadata["score"] <= 1
    assert doc.metadata["type"] == "fact" and doc.metadata["subject"] == "user"
    assert doc.metadata["metadata"] == {"source": "onboarding"} and doc.metadata["tags"] == ["diet"]

    # From a client, with memory_search arguments, and as a step of a chain.
    scoped = LangChainRetriever(client=Client(base_url, tenant.reader), search_kwargs={"scope": "style"})
    assert scoped.invoke("lactose intolerant") == []
    chain = scoped | RunnableLambda(_joined)
    assert chain.invoke("British English") == "Always answer in British English"


def _joined(found: list[Document]) -> str:
    return "\n".join(d.page_content for d in found)


async def test_langchain_retriever_ainvoke(base_url: str, tenant: TenantKeys, stored: MemoryOut) -> None:
    async with AsyncClient(base_url, tenant.reader) as recalld:
        native = LangChainRetriever(async_client=recalld, limit=1)
        docs = await native.ainvoke("lactose")
        assert [(d.page_content, d.metadata["id"]) for d in docs] == [(stored.content, str(stored.id))]
    threaded = LangChainRetriever(base_url=base_url, api_key=tenant.reader)
    assert [d.page_content for d in await threaded.ainvoke("lactose")] == [stored.content]


async def test_retrievers_see_only_their_tenant(
    base_url: str, stored: MemoryOut, make_tenant: TenantFactory
) -> None:
    other = await make_tenant("retriever-other")
    # The blocking retrievers may block this test's loop: the server runs in a thread of its own.
    assert LangChainRetriever(base_url=base_url, api_key=other.reader).invoke("lactose") == []
    assert LlamaIndexRetriever(base_url=base_url, api_key=other.reader).retrieve("lactose") == []


def test_llama_index_retriever_retrieve_returns_content_score_and_metadata(
    base_url: str, tenant: TenantKeys, stored: MemoryOut
) -> None:
    retriever = LlamaIndexRetriever(base_url=base_url, api_key=tenant.reader, limit=5)
    nodes = retriever.retrieve("is the user lactose intolerant")
    assert [n.node.get_content() for n in nodes] == ["The user is lactose intolerant"]
    hit = nodes[0]
    assert hit.node.node_id == str(stored.id) and hit.score is not None and 0 < hit.score <= 1
    assert (
        hit.node.metadata["metadata"] == {"source": "onboarding"} and hit.node.metadata["scope"] == "health"
    )
    # The LLM sees the text with its readable fields, not ids and score breakdowns.
    shown = hit.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "The user is lactose intolerant" in shown and "scope: health" in shown
    assert "score_breakdown" not in shown and str(stored.id) not in shown

    scoped = LlamaIndexRetriever(Client(base_url, tenant.reader), search_kwargs={"scope": "style"})
    assert [n.node.get_content() for n in scoped.retrieve("British English")] == [
        "Always answer in British English"
    ]


async def test_llama_index_retriever_aretrieve(base_url: str, tenant: TenantKeys, stored: MemoryOut) -> None:
    async with AsyncClient(base_url, tenant.reader) as recalld:
        nodes = await LlamaIndexRetriever(async_client=recalld).aretrieve("lactose")
        assert [(n.node.node_id, n.node.get_content()) for n in nodes] == [(str(stored.id), stored.content)]
    threaded = LlamaIndexRetriever(base_url=base_url, api_key=tenant.reader)
    assert [n.node.get_content() for n in await threaded.aretrieve("lactose")] == [stored.content]


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n{heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else None]


@pytest.mark.parametrize(
    ("document", "heading", "expected"),
    [
        ("README.md", "## Python client", ["User experiences nausea after dairy", "422 validation_error"]),
        ("clients/python/README.md", None, ["The user is lactose intolerant", "not_found memory not found"]),
    ],
)
def test_readme_python_examples_run_as_written(
    base_url: str,
    tenant: TenantKeys,
    document: str,
    heading: str | None,
    expected: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every python block of the client docs, in order, against a live server (its URL and a fresh key)."""
    markdown = (ROOT / document).read_text()
    blocks = _python_blocks(_section(markdown, heading) if heading else markdown)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    for block in blocks:
        code = block.replace("http://127.0.0.1:8080", base_url).replace('"rk_..."', repr(tenant.writer))
        exec(compile(code, document, "exec"), namespace)
    printed = capsys.readouterr().out
    for text in expected:
        assert text in printed
