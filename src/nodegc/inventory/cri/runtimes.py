"""One `RuntimeReader` per endpoint for the life of the process, so the status cache outlives a scan."""

from __future__ import annotations

import threading

from nodegc.inventory.cri.reading import RuntimeReader
from nodegc.model.runtime import RuntimeView
from nodegc.observe.logs import get_logger
from nodegc.settings import ScanOptions

log = get_logger(__name__)
_readers: dict[tuple[str, float, str | None], RuntimeReader] = {}
_lock = threading.Lock()
_said_absent: set[str] = set()


def runtime_reader(options: ScanOptions) -> RuntimeReader | None:
    if not options.runtime_endpoint:
        return None
    state_dir = str(options.runtime_state_dir) if options.runtime_state_dir else None
    key = (options.runtime_endpoint, options.runtime_timeout, state_dir)
    with _lock:
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = RuntimeReader(options.runtime_endpoint, timeout=options.runtime_timeout,
                                                   state_dir=state_dir)
        return reader


def read_runtime(options: ScanOptions) -> RuntimeView | None:
    """The runtime's view; None when no runtime is configured, or its socket has never existed here (a
    node without a runtime: the offline forensic mode), which is said once per endpoint. Once the runtime
    answered, a vanished socket is an unreachable runtime, not an absent one."""
    reader = runtime_reader(options)
    if reader is None:
        return None
    if not reader.seen_reachable and not reader.socket_present():
        if reader.endpoint not in _said_absent:
            _said_absent.add(reader.endpoint)
            log.info("no container runtime socket: sandbox rules are off, the API alone decides",
                     endpoint=reader.endpoint)
        return None
    return reader.read()


def forget_readers() -> None:
    """Close every reader (tests and a clean shutdown)."""
    with _lock:
        for reader in _readers.values():
            reader.close()
        _readers.clear()
        _said_absent.clear()
