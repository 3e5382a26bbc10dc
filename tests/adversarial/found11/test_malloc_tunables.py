"""GLIBC_TUNABLES (glibc.malloc.arena_max, .mmap_threshold, .trim_threshold) is the operator's choice as much
as the MALLOC_* variables: tune_malloc must not override it."""
from __future__ import annotations

import pytest

from nodegc.hostio import libc


def record_mallopt(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The mallopt calls tune_malloc makes from now on, with no MALLOC_* variable in the environment."""
    made: list[tuple[int, int]] = []

    class Lib:
        def mallopt(self, param: int, value: int) -> int:
            made.append((param, value))
            return 1

    monkeypatch.setattr(libc, "libc", Lib)
    for name in libc.LONG_RUNNING_MALLOC:
        monkeypatch.delenv(name, raising=False)
    return made


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    return record_mallopt(monkeypatch)


def test_glibc_tunables_win(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[int, int]]) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")
    done = libc.tune_malloc()
    assert "MALLOC_ARENA_MAX" not in done
    assert (libc.M_ARENA_MAX, 1) not in calls


def test_other_tunables_leave_the_settings_to_the_agent(monkeypatch: pytest.MonkeyPatch,
                                                        calls: list[tuple[int, int]]) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=65536")
    assert libc.tune_malloc() == ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"]
    assert (libc.M_TRIM_THRESHOLD, 128 * 1024) not in calls
