from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _warnings_pass() -> Iterator[None]:
    """The warnings reach the capture whatever level an earlier test left configured: a one-shot command run
    in this process logs from error up, and `capture_logs` keeps the level's filter."""
    old = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    yield
    structlog.configure(wrapper_class=old)
