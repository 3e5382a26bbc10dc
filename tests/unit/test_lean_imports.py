"""What a snapshot-fed agent does not import: asyncio (structlog's async loggers only) and yaml (YAML files only).

Run in a fresh interpreter: the test process has both already.
"""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
sys.modules['rich'] = None
import nodegc.agent, nodegc.cli, nodegc.desired.snapshot, nodegc.observe.logs
assert 'asyncio' not in sys.modules and 'yaml' not in sys.modules, sorted(sys.modules)
import structlog.stdlib
loop = structlog.stdlib.asyncio.get_event_loop_policy  # the stand-in: the real asyncio on first use
import asyncio
assert type(asyncio) is type(sys) and asyncio.get_event_loop_policy is loop
assert structlog.stdlib.asyncio.run is asyncio.run
log = nodegc.observe.logs.get_logger('t')
log.info('still logs')
print('ok')
"""


def test_the_agent_imports_neither_asyncio_nor_yaml_and_structlog_still_reaches_asyncio() -> None:
    done = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_asyncio_imported_first_is_left_as_it_is() -> None:
    check = ("import sys, asyncio; real = asyncio; import nodegc.observe.logs, structlog.stdlib;"
             " assert structlog.stdlib.asyncio is real and sys.modules['asyncio'] is real; print('ok')")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
