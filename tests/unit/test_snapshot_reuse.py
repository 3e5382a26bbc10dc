"""A snapshot kept fresh by touching it: its bytes are parsed once, its time is read at every fetch.

The agent's snapshot source re-reads the file whenever its stamp moved (a writer touches it to keep it
fresh); equal bytes parse to equal pods, so they are taken from the last parse and only dated anew. Any
other bytes (a same-size rewrite too) are parsed, and what a fresh source reads is what the reused one says.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired import snapshot
from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError

HOUR_AGO = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def pod(name: str, *, phase: str = "Running", node: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "d", "uid": f"u-{name}",
                         "creationTimestamp": HOUR_AGO.isoformat().replace("+00:00", "Z")},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def write(path: Path, *pods: dict[str, Any], mtime: float) -> None:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(pods)}))
    os.utime(path, (mtime, mtime))


def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = snapshot._parse

    def parse(content: bytes, **kwargs: Any) -> Any:
        calls.append(len(content))
        return real(content, **kwargs)

    monkeypatch.setattr(snapshot, "_parse", parse)
    return calls


def fresh(path: Path) -> Any:
    return SnapshotSource(path, "n1").fetch()


def test_a_touched_file_is_dated_anew_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parses = counted(monkeypatch)
    f = tmp_path / "pods.json"
    now = time.time()
    write(f, pod("a"), pod("b"), mtime=now - 30)
    source = SnapshotSource(f, "n1")
    first = source.fetch()
    for step in (20, 10, 0):
        os.utime(f, (now - step, now - step))
        state = source.fetch()
        assert state.fetched_at == datetime.fromtimestamp(now - step, UTC)
        assert state.pods is first.pods  # taken again
    assert len(parses) == 1
    monkeypatch.undo()
    assert state == fresh(f)


def test_other_bytes_of_the_same_size_are_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parses = counted(monkeypatch)
    f = tmp_path / "pods.json"
    now = time.time()
    write(f, pod("a"), pod("b"), mtime=now - 30)
    source = SnapshotSource(f, "n1")
    assert {p.phase for p in source.fetch().pods} == {"Running"}
    size = f.stat().st_size
    write(f, pod("a"), pod("b", phase="Pending"), mtime=now - 20)  # "Running" and "Pending" have 7 letters
    assert f.stat().st_size == size
    state = source.fetch()
    assert len(parses) == 2
    assert {p.name: p.phase for p in state.pods}["b"] == "Pending"
    monkeypatch.undo()
    assert state == fresh(f)


def test_a_refused_file_is_refused_at_every_read(tmp_path: Path) -> None:
    """A parse that failed leaves nothing to take again: the same bytes are refused again, and the good
    bytes before them are what a later return to them is read as."""
    f = tmp_path / "pods.json"
    now = time.time()
    write(f, pod("a"), mtime=now - 30)
    source = SnapshotSource(f, "n1")
    good = source.fetch()
    write(f, pod("a", node="other"), mtime=now - 20)
    for step in (20, 10):
        os.utime(f, (now - step, now - step))
        with pytest.raises(SourceError, match="none of them on node n1"):
            source.fetch()
    write(f, pod("a"), mtime=now)
    again = source.fetch()
    assert again.pods == good.pods
    assert again == fresh(f)
