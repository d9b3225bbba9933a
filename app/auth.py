"""API keys and the principal every /v1 request runs as."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Literal

Role = Literal["reader", "writer", "admin"]
ROLE_RANK: dict[str, int] = {"reader": 0, "writer": 1, "admin": 2}
KEY_PREFIX = "rk_"
# What mint_key produces: rk_, 8 hex digits, _, 43 url-safe base64 characters.
KEY_PATTERN = re.compile(r"rk_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: one tenant, one role, maybe the cross-tenant operator flag."""

    tenant_id: str
    tenant_name: str
    key_id: str
    role: Role
    operator: bool

    def may(self, role: Role) -> bool:
        """True when this principal's role includes `role`."""
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly minted key: the plain text is shown once, only the hash is stored."""

    plain: str
    prefix: str
    key_hash: bytes


def hash_key(plain: str) -> bytes:
    """Digest stored for a key.

    Keys are 256 random bits, not passwords: brute force is out of reach whatever the hash costs,
    so a slow hash would only add latency to every request. SHA-256 keeps a stolen table useless
    (it cannot be turned back into keys) at microsecond cost.
    """
    return hashlib.sha256(plain.encode()).digest()


def mint_key() -> NewKey:
    """Create a new random API key."""
    prefix = secrets.token_hex(4)
    plain = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    return NewKey(plain=plain, prefix=prefix, key_hash=hash_key(plain))


def parse_bearer(header: str | None) -> str | None:
    """The key from an Authorization header, or None when absent or malformed."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
