"""Remembered answers of pure one-argument functions, in a plain dict.

The scan asks a few functions (an address's canonical spelling, a netns path's key, the addresses a rule
names...) about the same few thousand texts every cycle. `functools.lru_cache` keeps a node of its linked
list beside every dict entry: 82 bytes an answer against 26 for the dict alone, about 0.5 MB at 1,000
pods held from one cycle to the next for an order nothing needs. Here the answers are kept until the dict
holds `maxsize` of them, then all are dropped at once: a node never holds that many, and a node that does
(a churn of addresses over days) starts afresh, as a new process would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def remembered(maxsize: int) -> Callable[[Callable[[K], V]], Callable[[K], V]]:
    """Decorate a pure function of one hashable argument: its answers kept, at most `maxsize` at a time.
    An exception is not remembered (the next call raises it again). Safe across threads: a dict's get
    and set are atomic, and a race costs an answer computed twice at worst."""

    def decorate(fn: Callable[[K], V]) -> Callable[[K], V]:
        known: dict[K, V] = {}
        missing = object()

        @functools.wraps(fn)
        def answer(key: K) -> V:
            found = known.get(key, missing)
            if found is missing:
                found = fn(key)
                if len(known) >= maxsize:
                    known.clear()
                known[key] = found
            return found  # type: ignore[return-value]

        return answer

    return decorate
