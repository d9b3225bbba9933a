"""Python client for recalld: Client and AsyncClient, typed models, and one exception per error status."""

from recalld_client._core import __version__
from recalld_client.async_client import AsyncClient
from recalld_client.client import Client
from recalld_client.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    RecalldError,
    ServerError,
    ServiceUnavailableError,
)

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "InvalidRequestError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "RecalldError",
    "ServerError",
    "ServiceUnavailableError",
    "__version__",
]
