"""h2 and protobuf are loaded only where a runtime socket is asked: a node without one never pays their memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nodegc.inventory.cri.client import RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message, message_class


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_agent_without_a_runtime_socket_loads_no_h2_or_protobuf(tmp_path: Path) -> None:
    """Every module the agent command imports, and a runtime read on an endpoint whose socket does not
    exist (the node has no runtime, or it is not configured), leave h2 and protobuf unloaded; grpc is never
    loaded."""
    endpoint = f"unix://{tmp_path}/no-such.sock"
    code = (
        "import sys\n"
        "import nodegc.agent, nodegc.cli, nodegc.commands, nodegc.wiring, nodegc.engine.cycle\n"
        "import nodegc.inventory.scanning, nodegc.reclaim.dispatch, nodegc.reclaim.sandboxes\n"
        "from nodegc.inventory.cri.runtimes import read_runtime, runtime_reader\n"
        "from nodegc.settings import ScanOptions\n"
        "assert read_runtime(ScanOptions(runtime_endpoint=None)) is None\n"
        f"options = ScanOptions(runtime_endpoint={endpoint!r})\n"
        "assert read_runtime(options) is None and read_runtime(options) is None\n"
        "assert runtime_reader(options) is not None\n"
        "print([m for m in ('grpc', 'h2', 'google.protobuf') if m in sys.modules])\n"
    )
    assert _run(code) == "[]"


def test_a_client_loads_h2_and_a_message_loads_protobuf() -> None:
    code = (
        "import sys\n"
        "from nodegc.inventory.cri.messages import message\n"
        "before = 'google.protobuf' in sys.modules\n"
        "message('VersionRequest', version='v1')\n"
        "from nodegc.inventory.cri.client import RuntimeClient\n"
        "middle = 'h2' in sys.modules\n"
        "RuntimeClient('unix:///nonexistent/runtime.sock').close()\n"
        "print([before, 'google.protobuf' in sys.modules, middle, 'h2' in sys.modules, 'grpc' in sys.modules])\n"
    )
    assert _run(code) == "[False, True, False, True, False]"


def test_messages_are_built_once_and_shared() -> None:
    assert message_class("VersionRequest") is message_class("VersionRequest")
    assert type(message("VersionRequest", version="v1")) is message_class("VersionRequest")


def test_no_socket_is_runtime_unavailable_through_the_lazy_h2(tmp_path: Path) -> None:
    """A socket nobody listens on is UNAVAILABLE (or a deadline), which is "the runtime could not be asked",
    never an answer."""
    with RuntimeClient(f"unix://{tmp_path}/absent.sock", timeout=2.0) as client, \
            pytest.raises(RuntimeUnavailable) as caught:
        client.version()
    assert caught.value.code in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
