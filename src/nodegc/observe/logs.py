"""Structured logs on stderr: JSON for machines, key=value colours for a person at a terminal.

Libraries that log through the standard `logging` module (lightkube, httpx2, httpcore2, h2, hpack, asyncio) go through
the same renderer into the same stream, with their logger name kept under "logger"; below debug they
speak from warning up (httpx2 logs every request at info).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO, cast

import structlog

THIRD_PARTY = ("lightkube", "httpx2", "httpcore2", "httpx", "httpcore", "h2", "hpack", "asyncio")


def configure_logging(level: str = "info", *, json_output: bool | None = None) -> None:
    if json_output is None:
        json_output = not sys.stderr.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer()
    _route_stdlib(level, renderer)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=False,
    )


def _route_stdlib(level: str, renderer: Any) -> None:
    """One handler on the root logger, rendering stdlib records with structlog's renderer."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.ExtraAdder(),
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    renderer],
    )
    handler = logging.StreamHandler(cast(TextIO, _CurrentStderr()))
    handler.setFormatter(formatter)
    handler.set_name("nodegc")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "nodegc"]:
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelNamesMapping()[level.upper()]
    root.setLevel(numeric)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING))


class _CurrentStderr:
    """Whatever sys.stderr is at each write (a test harness may swap and close it between calls)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
