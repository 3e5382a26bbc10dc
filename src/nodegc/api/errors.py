"""The one translator of API failures: every way a client call can fail becomes a `KubeError`.

It carries the HTTP status when the server answered, so callers tell 404 and 409 apart, and keeps its
cause (`raise ... from e`). Messages name the call and the status, never a token or a whole payload
(a Status body's message is left out: it may quote the request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import httpx2
import lightkube
from msgspec import MsgspecError

T = TypeVar("T")

NOT_FOUND = 404
CONFLICT = 409
ALREADY_EXISTS = 409
GONE = 410


class KubeError(Exception):
    """An API call failed; `code` is the HTTP status when the server answered, else None."""

    def __init__(self, message: str, *, code: int | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.timed_out = timed_out

    @property
    def conflict(self) -> bool:
        return self.code == CONFLICT

    @property
    def not_found(self) -> bool:
        return self.code == NOT_FOUND

    @property
    def gone(self) -> bool:
        return self.code == GONE


def call(what: str, fn: Callable[[], T], *, timeout: float | None = None) -> T:
    """Run one client call (a lazy list must be consumed inside `fn`); failures become KubeError.

    `timeout`, when given, is named in the message of a timed-out call.
    """
    try:
        return fn()
    except lightkube.ApiError as e:
        # The HTTP status is the answer's; a Status body can claim any code (a 5xx whose body says 404 is no
        # NotFound).
        code = e.response.status_code
        reason = e.status.reason or e.response.reason_phrase
        raise KubeError(f"{what} failed: HTTP {code} {reason}", code=code) from e
    except httpx2.HTTPStatusError as e:
        raise KubeError(
            f"{what} failed: HTTP {e.response.status_code} {e.response.reason_phrase}",
            code=e.response.status_code,
        ) from e
    except httpx2.TimeoutException as e:
        after = f" after {timeout:g}s" if timeout is not None else ""
        said = f": {e}" if str(e) and str(e) != "timed out" else ""
        raise KubeError(f"{what} timed out{after} ({type(e).__name__}{said})", timed_out=True) from e
    except httpx2.HTTPError as e:
        raise KubeError(f"{what} failed: {type(e).__name__}: {e}") from e
    except (MsgspecError, ValueError, TypeError, KeyError, RecursionError) as e:
        # RecursionError: an answer nested thousands deep, which the JSON decoder cannot follow. KeyError: an
        # error answer without the Content-Type lightkube's error decoding looks up.
        raise KubeError(f"{what}: malformed API response: {type(e).__name__}: {e}") from e


def get_or_none(what: str, fn: Callable[[], T]) -> T | None:
    """A GET whose 404 means "does not exist" (None); every other failure raises KubeError."""
    try:
        return call(what, fn)
    except KubeError as e:
        if e.not_found:
            return None
        raise
