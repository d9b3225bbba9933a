"""The error body every failure answers with."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str = Field(
        ...,
        description="Machine-readable: unauthorized, forbidden, not_found, validation_error, payload_too_large, …",
    )
    message: str = Field(..., description="For people: which field or rule, and why.")
    details: Any = Field(
        None, description="Per-field problems for validation errors (loc, msg, type), or null."
    )


class ErrorOut(BaseModel):
    """Every error response has this shape."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "validation_error",
                        "message": "importance: Input should be less than or equal to 10",
                        "details": [
                            {
                                "loc": ["body", "importance"],
                                "msg": "Input should be less than or equal to 10",
                                "type": "less_than_equal",
                            }
                        ],
                    }
                }
            ]
        }
    )
    error: ErrorDetail = Field(..., description="The error.")
