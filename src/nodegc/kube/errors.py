"""One error type for every API call, carrying the HTTP status so callers can tell 404 and 409 apart.

Messages name the call and the status, never a token or a whole payload.
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


class KubeError(Exception):
    """An API call failed; `code` is the HTTP status when the server answered, else None."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def conflict(self) -> bool:
        return self.code == CONFLICT

    @property
    def not_found(self) -> bool:
        return self.code == NOT_FOUND


def call(what: str, fn: Callable[[], T]) -> T:
    """Run one client call; every way it can fail becomes a KubeError that keeps its cause."""
    try:
        return fn()
    except lightkube.ApiError as e:
        code = e.status.code if e.status.code is not None else e.response.status_code
        reason = e.status.reason or e.response.reason_phrase
        raise KubeError(f"{what} failed: HTTP {code} {reason}", code=code) from e
    except httpx2.HTTPStatusError as e:
        raise KubeError(
            f"{what} failed: HTTP {e.response.status_code} {e.response.reason_phrase}",
            code=e.response.status_code,
        ) from e
    except httpx2.HTTPError as e:
        raise KubeError(f"{what} failed: {type(e).__name__}: {e}") from e
    except (MsgspecError, ValueError, TypeError) as e:
        raise KubeError(f"{what}: malformed API response: {type(e).__name__}: {e}") from e
