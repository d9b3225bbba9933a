"""A write's truth rules: idempotency, what makes two memories duplicates, which facts a new one replaces."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from app.errors import ApiError
from app.repositories.memories import NewMemory
from app.repositories.memory_truth import PredicateSlot
from app.services.requests import MemoryDraft
from app.services.scopes import ScopeSettings


def write_fingerprint(item: MemoryDraft) -> bytes:
    """Digest of everything a write asked for (kind included): what an idempotency key stands for."""
    canonical = json.dumps(dataclasses.asdict(item), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


def _same_write(item: MemoryDraft, stored: Mapping[str, Any]) -> bool:
    fingerprint = stored["idempotency_fingerprint"]
    if fingerprint is not None:
        return bytes(fingerprint) == write_fingerprint(item)
    # Stored before fingerprints existed: the kind and the text are what can still be compared.
    return bool(stored["kind"] == item.kind and stored["content"] == item.content)


def ensure_same_writes(items: Sequence[MemoryDraft], existing: Mapping[str, Mapping[str, Any]]) -> None:
    """409 when an idempotency key was first used for a different write."""
    for item in items:
        stored = existing.get(item.idempotency_key or "")
        if stored is not None and not _same_write(item, stored):
            raise ApiError(
                409,
                "idempotency_conflict",
                f"idempotency_key {item.idempotency_key!r} was already used for a different write "
                f"(a {stored['kind']} {stored['id']}); retry with the same body, or use a new key",
                {"idempotency_key": item.idempotency_key, "id": str(stored["id"]), "type": stored["kind"]},
            )


Identity = tuple[str, str, str | None, str | None, bytes]


def identity_of(
    kind: str, scope: str, subject: str | None, butler: str | None, session_id: str | None, key: bytes | None
) -> Identity | None:
    """What makes two memories duplicates: kind, scope, subject (facts) or butler (episodes), content."""
    # A conversation's turns are positional: "yes" said twice in a session is two turns, not one.
    if key is None or (kind == "episode" and session_id is not None):
        return None
    return (kind, scope, subject if kind == "fact" else None, butler if kind == "episode" else None, key)


def row_identity(row: NewMemory) -> Identity | None:
    """identity_of for a row about to be written."""
    return identity_of(row.kind, row.scope, row.subject, row.butler, row.session_id, row.content_key)


def lock_key(tenant_id: str, *parts: object) -> int:
    """A 64-bit advisory lock key for a duplicate identity or a predicate slot of one tenant."""
    digest = hashlib.sha256(repr((tenant_id, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def check_drafts(items: Sequence[MemoryDraft]) -> None:
    """422 for what the schema cannot see: valid time order, supersede without a slot."""
    for n, item in enumerate(items):
        start = item.valid_from or item.created_at
        if item.valid_to is not None and start is not None and item.valid_to <= start:
            raise ApiError(
                422,
                "validation_error",
                f"valid_to must be later than valid_from (item {n})",
                {"item": n, "field": "valid_to"},
            )
        if item.supersede == "subject_predicate" and not (item.subject and item.predicate):
            raise ApiError(
                422,
                "validation_error",
                f'supersede "subject_predicate" needs both subject and predicate (item {n})',
                {"item": n, "field": "supersede"},
            )


@dataclasses.dataclass(slots=True)
class Truth:
    """What the write did besides storing: duplicates answered, facts superseded."""

    duplicate_of: dict[uuid.UUID, uuid.UUID] = dataclasses.field(default_factory=dict)
    superseded: dict[uuid.UUID, list[uuid.UUID]] = dataclasses.field(default_factory=dict)
    confirmed: dict[uuid.UUID, Any] = dataclasses.field(default_factory=dict)
    similar: dict[uuid.UUID, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)


def predicate_slot(
    row: NewMemory, item: MemoryDraft, settings: Mapping[str, ScopeSettings]
) -> PredicateSlot | None:
    """The subject/predicate/scope a fact replaces the active facts of, when it does."""
    if row.kind != "fact" or not row.subject or not row.predicate:
        return None
    single = settings[row.scope].single_valued_predicates or ()
    if item.supersede == "subject_predicate" or row.predicate in single:
        return PredicateSlot(row.subject, row.predicate, row.scope)
    return None


def chain_within_request(
    rows: Sequence[tuple[NewMemory, PredicateSlot]], truth: Truth
) -> dict[PredicateSlot, NewMemory]:
    """Facts of one slot in one request replace each other in request order; the first of each slot."""
    first: dict[PredicateSlot, NewMemory] = {}
    last: dict[PredicateSlot, NewMemory] = {}
    for row, slot in rows:
        before = last.get(slot)
        if before is None:
            first[slot] = row
        else:
            assert row.valid_from is not None and before.valid_from is not None
            before.validity = "superseded"
            before.superseded_by = row.id
            before.valid_to = max(before.valid_from, row.valid_from)
            row.supersedes = row.supersedes or before.id
            truth.superseded.setdefault(row.id, []).append(before.id)
        last[slot] = row
    return first
