"""A watch event without a numeric resourceVersion while the view holds one is no longer applied, nor taken
as the point the next watch resumes from (found15_desired). A BOOKMARK's version still was: an opaque one
(a proxy or re-encoding layer that rewrote it) became the resume point, the API server answered every
following watch 400 (an invalid resourceVersion), and the cache retried that same version, backed off,
until the resync: the view went stale and every cycle was refused meanwhile, never progressing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.adversarial.watch_answers import (
    first_watch_answers,
    line,
    past_first_answer,
    pod,
    reflector,
    watch_api,
)
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with watch_api() as server:
        yield server


@pytest.mark.parametrize("version", ["", "not-a-number"], ids=["empty", "opaque"])
def test_a_bookmark_without_a_comparable_version_is_not_resumed_from(
        api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    api.add_pod(pod("a1"))
    asked = first_watch_answers(api, monkeypatch, line("BOOKMARK", {"kind": "Pod",
                                                                    "metadata": {"resourceVersion": version}}))
    ref = reflector(kubeconfig, resync_seconds=600.0)
    try:
        past_first_answer(ref, asked)
        resumed = [parse_qs(urlsplit(path).query).get("resourceVersion", [""])[0] for path in asked]
        assert all(rv.isdigit() for rv in resumed), resumed
        assert [p.name for p in ref.proven(max_age_seconds=40.0).pods] == ["a1"]
    finally:
        ref.stop()
