"""The API client is loaded only where the pods come from the API: an agent fed by a snapshot file never
pays its memory (lightkube, httpx2 and msgspec are about 6 MiB of a 1,000-pod agent's resident set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_a_snapshot_agent_loads_no_api_client(tmp_path: Path) -> None:
    snapshot = tmp_path / "pods.json"
    snapshot.write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    code = (
        "import sys\n"
        "import nodegc.agent, nodegc.cli, nodegc.wiring, nodegc.engine.cycle, nodegc.observe.health\n"
        "from nodegc.flags import build_parser\n"
        f"args = build_parser().parse_args(['agent', '--node', 'n1', '--pods-from', {str(snapshot)!r}])\n"
        "settings = nodegc.wiring.agent_from_args(args)\n"
        "nodegc.wiring.make_source(settings.source).fetch()\n"
        "print([m for m in ('lightkube', 'httpx2', 'msgspec') if m in sys.modules])\n"
    )
    assert _run(code) == "[]"


def test_the_agent_loads_the_api_client_once_it_watches() -> None:
    code = (
        "import sys\n"
        "import nodegc.agent\n"
        "before = 'lightkube' in sys.modules\n"
        "from nodegc.agent import record_events\n"
        "import nodegc.desired.reflector\n"
        "print([before, 'lightkube' in sys.modules])\n"
    )
    assert _run(code) == "[False, True]"
