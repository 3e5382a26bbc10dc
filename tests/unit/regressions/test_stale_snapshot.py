"""A snapshot is as fresh as its file: a day-old `--pods-from` file must look a day old to the engine's
staleness guard, or every pod created since would look like residue."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource

POD = {"metadata": {"name": "p", "namespace": "d", "uid": "u1"}, "spec": {"nodeName": "n1"},
       "status": {"phase": "Running", "podIP": "10.0.0.2"}}


def test_snapshot_age_is_the_files_age(tmp_path: Path) -> None:
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": [POD]}))
    day_ago = time.time() - 86400
    os.utime(f, (day_ago, day_ago))
    state = SnapshotSource(f, "n1").fetch()
    assert state.fetched_at.timestamp() <= day_ago + 1, "a day-old snapshot is reported as fresh"
