"""observe: metrics, structured logs, health.

structlog's modules import asyncio for their async loggers alone, which nodegc never calls; asyncio (with
the ssl module it imports) is about 1.5 MiB of a snapshot-fed agent's memory. So structlog is imported here
with a stand-in that imports the real asyncio on its first attribute: the stand-in stays only in structlog's
modules, and everything else that imports asyncio gets the real one (the API client does).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _AsyncioOnUse(types.ModuleType):
    """asyncio in structlog's namespaces until one of its names is asked for."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get("asyncio") is self:
            del sys.modules["asyncio"]
        return getattr(importlib.import_module("asyncio"), name)


def _import_structlog() -> None:
    if "structlog" in sys.modules or "asyncio" in sys.modules:
        return
    stand_in = _AsyncioOnUse("asyncio")
    sys.modules["asyncio"] = stand_in
    try:
        importlib.import_module("structlog")
    finally:
        if sys.modules.get("asyncio") is stand_in:
            del sys.modules["asyncio"]


_import_structlog()
