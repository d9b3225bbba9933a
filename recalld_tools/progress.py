"""Progress output of long CLI runs (index, eval, bench): one tqdm bar on stderr."""

from __future__ import annotations

import sys
from typing import Never

from tqdm import tqdm


def progress_bar(total: int, label: str, *, enabled: bool = True) -> tqdm[Never]:
    """A bar counting to total on stderr (no iterable: callers call update); silent when not enabled."""
    return tqdm(total=total, desc=label, file=sys.stderr, disable=not enabled, dynamic_ncols=True)
