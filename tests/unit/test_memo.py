"""`model.memo.remembered`: the answers of a pure function, kept in a plain bounded dict."""

from __future__ import annotations

import pytest

from nodegc.model.memo import remembered


def test_answers_are_remembered_and_bounded() -> None:
    calls: list[str] = []

    @remembered(3)
    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert [upper(x) for x in ("a", "b", "a", "c", "b")] == ["A", "B", "A", "C", "B"]
    assert calls == ["a", "b", "c"]
    upper("d")  # the fourth answer: the three kept are dropped first
    upper("a")
    assert calls == ["a", "b", "c", "d", "a"]


def test_none_is_an_answer_and_a_key() -> None:
    calls: list[object] = []

    @remembered(8)
    def nothing(key: str | None) -> None:
        calls.append(key)

    nothing(None)
    nothing(None)
    assert calls == [None]


def test_an_exception_is_not_remembered() -> None:
    calls: list[str] = []

    @remembered(8)
    def fails(text: str) -> str:
        calls.append(text)
        raise ValueError(text)

    for _ in range(2):
        with pytest.raises(ValueError, match="x"):
            fails("x")
    assert calls == ["x", "x"]
