"""A progress bar on stderr for long work, when tqdm (the ``bench`` extra) is installed."""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(total: int | None, label: str, unit: str = "item") -> Any:
    """A tqdm bar, or None when tqdm is not installed (callers then stay quiet)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=label, unit=unit, file=sys.stderr, leave=False)
