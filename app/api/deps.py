"""Request dependencies: state, the database handle, and the authenticated principal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from app.auth import Principal, Role, parse_bearer
from app.errors import ApiError
from app.infra.db import Database
from app.rate_limit import retry_after_header
from app.services.tenants import authenticate
from app.state import ServiceState


async def get_state(request: Request) -> ServiceState:
    """The ServiceState built by the lifespan (async: a sync dependency would hop to a thread)."""
    state: ServiceState = request.app.state.service
    return state


async def get_db(state: Annotated[ServiceState, Depends(get_state)]) -> Database:
    """The services' database handle; connections are taken only around database work."""
    return state.db


async def get_principal(request: Request, db: Annotated[Database, Depends(get_db)]) -> Principal:
    """Authenticate the bearer key; 401 when missing, unknown or revoked."""
    plain = parse_bearer(request.headers.get("authorization"))
    if plain is None:
        raise ApiError(401, "unauthorized", "missing API key: send 'Authorization: Bearer <key>'")
    async with db.connection() as conn:
        principal = await authenticate(conn, plain)
    if principal is None:
        raise ApiError(401, "unauthorized", "invalid or revoked API key")
    limiter = (await get_state(request)).rate_limiter
    wait = limiter.acquire(principal.key_id) if limiter is not None else None
    if limiter is not None and wait is not None:
        raise ApiError(
            429,
            "too_many_requests",
            f"this API key is over its rate limit ({limiter.per_second:g} requests/s, bursts of "
            f"{limiter.burst}); retry after the Retry-After seconds",
            headers={"Retry-After": retry_after_header(wait)},
        )
    return principal


def ensure_role(principal: Principal, role: Role) -> None:
    """403 unless the principal's role includes `role`."""
    if not principal.may(role):
        raise ApiError(
            403, "forbidden", f"this operation needs the {role} role; the key has {principal.role}"
        )


def require_role(role: Role) -> Callable[[Principal], Awaitable[Principal]]:
    """Dependency factory: 403 unless the caller's role includes `role`."""

    async def check(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        ensure_role(principal, role)
        return principal

    return check


StateDep = Annotated[ServiceState, Depends(get_state)]
DbDep = Annotated[Database, Depends(get_db)]
Reader = Annotated[Principal, Depends(require_role("reader"))]
Writer = Annotated[Principal, Depends(require_role("writer"))]
Admin = Annotated[Principal, Depends(require_role("admin"))]
