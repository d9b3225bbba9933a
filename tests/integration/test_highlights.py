"""Highlights skip the stopwords the keyword leg drops, in a search's answer too."""

from __future__ import annotations

import asyncpg
import httpx

from app.retrieval.highlights import STOPWORDS
from tests.support import TenantFactory


async def test_the_stopwords_are_those_the_keyword_leg_drops(admin_conn: asyncpg.Connection) -> None:
    words = sorted(STOPWORDS)
    kept = await admin_conn.fetch(
        "SELECT w FROM unnest($1::text[]) AS w WHERE to_tsvector('english', w) <> ''::tsvector", words
    )
    assert [row["w"] for row in kept] == []
    # And a word outside the list is kept, so the check above can fail.
    assert await admin_conn.fetchval("SELECT to_tsvector('english', 'user') <> ''::tsvector")


async def test_search_highlights_skip_stopwords(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    content = "What the user eats for breakfast"
    stored = await client.post("/v1/facts", json={"content": content}, headers=tenant.headers())
    assert stored.status_code == 201
    found = await client.post(
        "/v1/search",
        json={"query": "what does the user eat", "mode": "keyword"},
        headers=tenant.headers("reader"),
    )
    [hit] = found.json()["results"]
    assert [content[start:end] for start, end in hit["highlights"]] == ["user", "eats"]
