"""The base models: how requests and responses treat fields, and the memory types.

Requests refuse unknown fields (the server would too); responses keep fields this version does not
know yet (`extra="allow"`), so a newer server never breaks an older client. Limits (lengths, ranges)
are left to the server, whose 422 names each problem.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

MemoryType = Literal["fact", "rule", "episode", "document", "code"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
