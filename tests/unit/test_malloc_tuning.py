"""The agent's allocator settings (hostio.libc.tune_malloc): glibc's mallopt, unless the environment says."""

from __future__ import annotations

import pytest

from nodegc.hostio import libc


def test_each_setting_not_in_the_environment_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    class Lib:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(libc, "libc", Lib)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # the operator's
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    assert libc.tune_malloc() == ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
    assert calls == [(libc.M_MMAP_THRESHOLD, 128 * 1024), (libc.M_TRIM_THRESHOLD, 128 * 1024)]


def test_a_refused_setting_or_a_c_library_without_mallopt_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing:
        def mallopt(self, param: int, value: int) -> int:
            return 0

    monkeypatch.setattr(libc, "libc", Refusing)
    for name in libc.LONG_RUNNING_MALLOC:
        monkeypatch.delenv(name, raising=False)
    assert libc.tune_malloc() == []
    monkeypatch.setattr(libc, "libc", object)
    assert libc.tune_malloc() == []


def test_the_real_mallopt_takes_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc (the image's and CI's C library) accepts them: mallopt returns 1."""
    for name in libc.LONG_RUNNING_MALLOC:
        monkeypatch.delenv(name, raising=False)
    assert libc.tune_malloc({"MALLOC_TRIM_THRESHOLD_": (libc.M_TRIM_THRESHOLD, 128 * 1024)}) == [
        "MALLOC_TRIM_THRESHOLD_"]


def test_trimming_calls_malloc_trim_where_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    class Lib:
        def malloc_trim(self, pad: int) -> int:
            calls.append(pad)
            return 1

    monkeypatch.setattr(libc, "libc", Lib)
    libc.trim_malloc()
    assert calls == [0]
    monkeypatch.setattr(libc, "libc", object)
    libc.trim_malloc()  # another C library: nothing to call, no error
    monkeypatch.undo()
    libc.trim_malloc()  # glibc's
