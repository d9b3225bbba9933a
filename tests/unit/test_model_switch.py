"""The model gate a switch's cut-over closes, and the progress it reports (no database, no model)."""

from __future__ import annotations

import asyncio

import pytest

from app.embeddings.factory import switch_command
from app.model_gate import ModelGate
from app.services.embedding_switch import progress_view

pytestmark = pytest.mark.unit


async def test_closing_the_gate_waits_for_requests_inside_and_holds_new_ones() -> None:
    gate = ModelGate()
    order: list[str] = []
    leave = asyncio.Event()

    async def inside() -> None:
        async with gate.use():
            order.append("inside")
            await leave.wait()
        order.append("left")

    async def late() -> None:
        async with gate.use():
            order.append("late")

    first = asyncio.create_task(inside())
    await asyncio.sleep(0)

    async def cut_over() -> None:
        async with gate.closed(drain_seconds=5) as drained:
            order.append(f"cut-over drained={drained}")
            await asyncio.sleep(0)

    closing = asyncio.create_task(cut_over())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(late())
    await asyncio.sleep(0)
    assert order == ["inside"]
    leave.set()
    await asyncio.gather(first, closing, waiting)
    assert order == ["inside", "left", "cut-over drained=True", "late"]


async def test_a_request_that_outlasts_the_drain_makes_the_cut_over_give_up() -> None:
    gate = ModelGate()
    stay = asyncio.Event()

    async def long_upload() -> None:
        async with gate.use():
            await stay.wait()

    upload = asyncio.create_task(long_upload())
    await asyncio.sleep(0)
    async with gate.closed(drain_seconds=0.01) as drained:
        assert not drained
    async with gate.use():  # open again afterwards
        pass
    stay.set()
    await upload


def test_progress_counts_rate_and_eta() -> None:
    record = {
        "source": {"provider": "local", "model": "all-MiniLM-L6-v2", "dim": 384},
        "target": {"provider": "openai", "model": "m", "dim": 768},
        "state": "running",
        "progress": {"state": "running", "rate": 25.0},
    }
    view = progress_view(record, done=500, total=1000)
    assert (view["done"], view["total"], view["rate_per_second"], view["eta_seconds"]) == (
        500,
        1000,
        25.0,
        20,
    )
    assert progress_view({**record, "progress": {}}, done=1, total=2)["eta_seconds"] is None
    assert progress_view(record, done=2, total=2)["eta_seconds"] == 0


def test_the_refusal_names_the_command_that_switches() -> None:
    assert switch_command({"provider": "local", "model": "all-MiniLM-L6-v2", "dim": 384}) == (
        "recalld embeddings switch --provider local"
    )
    assert switch_command({"provider": "openai", "model": "bge-m3", "dim": 1024}) == (
        "recalld embeddings switch --provider openai --model bge-m3 --dim 1024"
    )
    assert switch_command({"provider": "openai", "model": "bge-m3", "dim": None}).endswith("--model bge-m3")
