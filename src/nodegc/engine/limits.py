"""A token bucket for the global reclaim rate."""

from __future__ import annotations

from collections.abc import Callable


class TokenBucket:
    def __init__(self, *, per_minute: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.tokens = float(burst)
        self.clock = clock
        self.stamp = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
