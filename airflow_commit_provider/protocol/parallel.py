"""Running one step over many items with a few threads: object-store requests gain from it, local renames less."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def parallel(fn: Callable[[T], Any], items: Sequence[T], threads: int) -> None:
    """Run *fn* over *items* with *threads* workers; the first exception propagates after the pool drains."""
    if threads <= 1 or len(items) <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        for _ in pool.map(fn, items):
            pass
