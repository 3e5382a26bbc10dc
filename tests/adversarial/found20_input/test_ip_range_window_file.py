"""The IP range window file (`ip-ranges.json` in the state directory) is read once at the agent's start and
written every few minutes. A FIFO in its place blocked the start in `open`; the save wrote through a symlink
planted at `ip-ranges.json.tmp`, into whatever file it named outside the state directory."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from nodegc.agent import RANGES_FILE, RangeWindowFile
from nodegc.planning.ipranges import RangeTracker


def test_a_fifo_in_its_place_does_not_block_the_start(tmp_path: Path) -> None:
    path = tmp_path / RANGES_FILE
    os.mkfifo(path)
    taken: list[int] = []
    worker = threading.Thread(target=lambda: taken.append(RangeWindowFile(path, RangeTracker()).load()),
                              daemon=True)
    worker.start()
    worker.join(10)
    blocked = worker.is_alive()
    if blocked:  # let the blocked open go, so the thread ends
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
    assert not blocked and taken == [0]
    assert path.exists()  # left for the operator to see; the save replaces it


def test_the_save_does_not_write_through_a_planted_symlink(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("keep me")
    (state / (RANGES_FILE + ".tmp")).symlink_to(outside)
    RangeWindowFile(state / RANGES_FILE, RangeTracker()).save(force=True)
    assert outside.read_text() == "keep me"
    assert json.loads((state / RANGES_FILE).read_text())["version"] == 1
    assert not (state / (RANGES_FILE + ".tmp")).exists()
