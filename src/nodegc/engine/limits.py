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

    def take(self, n: int = 1) -> bool:
        """Take n tokens at once; a group larger than the burst passes when the bucket is full, so a
        sandbox is never split across cycles by the rate limit."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        need = min(float(n), self.burst)
        if self.tokens >= need:
            self.tokens -= need
            return True
        return False
