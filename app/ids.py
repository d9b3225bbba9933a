"""Memory ids that sort in write order: UUIDv7 (RFC 9562) with a monotonic counter."""

from __future__ import annotations

import os
import threading
import time
import uuid

# The 74 bits of a UUIDv7 that are not its millisecond timestamp, version or variant.
_RANDOM_BITS = 74
_lock = threading.Lock()
_last = 0


def time_ordered_uuid() -> uuid.UUID:
    """A UUIDv7 greater than every one this process made before (RFC 9562 §6.2, method 3).

    Session order is created_at, then id (SPEC R-S17): turns written with one created_at keep the
    order they were written in (a batch's items in their order, then batches as they arrive)
    because each new id is above the last, even within one millisecond or when the clock steps back.
    """
    global _last
    fresh = (time.time_ns() // 1_000_000) << _RANDOM_BITS | int.from_bytes(os.urandom(10)) >> 6
    with _lock:
        _last = payload = max(fresh, _last + 1)
    milliseconds = payload >> _RANDOM_BITS
    rand_a = (payload >> 62) & 0xFFF
    rand_b = payload & ((1 << 62) - 1)
    return uuid.UUID(int=milliseconds << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b)
