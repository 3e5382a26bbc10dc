"""The IP range window file (`ip-ranges.json` in the state directory) is read once at the agent's start and
any malformed content must be a fresh start. A sample holding an integer too big for a float made
`math.isfinite` raise OverflowError, which escaped the load and stopped the agent at every start."""

from __future__ import annotations

import json
import time
from pathlib import Path

from nodegc.agent import RANGES_FILE, RangeWindowFile
from nodegc.planning.ipranges import RangeTracker


def _doc(row: list[object]) -> str:
    return json.dumps({"version": 1, "node": "node-a",
                       "series": [{"network": "net", "range": "10.0.0.0/24", "samples": [row]}]})


def test_an_integer_too_big_for_a_float_is_a_skipped_sample(tmp_path: Path) -> None:
    now = time.time()
    (tmp_path / RANGES_FILE).write_text(_doc([now - 10, 10**400, 1, 0, 1, 0]))
    assert RangeWindowFile(tmp_path / RANGES_FILE, RangeTracker(), clock=lambda: now).load() == 0


def test_a_good_sample_beside_it_is_still_taken(tmp_path: Path) -> None:
    now = time.time()
    doc = json.loads(_doc([now - 10, 10**400, 1, 0, 1, 0]))
    doc["series"][0]["samples"].append([now - 5, 3, 1, 0, 1, 0])
    (tmp_path / RANGES_FILE).write_text(json.dumps(doc))
    assert RangeWindowFile(tmp_path / RANGES_FILE, RangeTracker(), clock=lambda: now).load() == 1
