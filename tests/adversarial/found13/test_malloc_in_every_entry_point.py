"""glibc's allocator settings for a long-running process (`hostio.libc.tune_malloc`: one arena, a fixed mmap
threshold) were made by the agent only: the controller, as long-running as the agent and reading list pages
of EndpointSlices and pods, and the one-shot commands kept glibc's adaptive threshold, under which a freed
buffer of a few MB raises the threshold and every later one stays in the heap. Each entry point now makes
them before any thread starts, and an operator's MALLOC_* variable or GLIBC_TUNABLES still wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.cli import main
from nodegc.hostio import libc
from tests.adversarial.found11.test_malloc_tunables import record_mallopt
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The mallopt calls made, with no MALLOC_* variable and an operator's arena count in GLIBC_TUNABLES."""
    made = record_mallopt(monkeypatch)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    return made


EXPECTED = [(libc.M_MMAP_THRESHOLD, 128 * 1024)]
"""What is left to make: the arena count and the trim threshold are the operator's."""


def test_the_controller_makes_the_settings(api: FakeKubeAPI, kubeconfig: Path, calls: list[tuple[int, int]]) -> None:
    code = main(["controller", "--kubeconfig", str(kubeconfig), "--lease-namespace", "default",
                 "--identity", "r1", "--interval", "0.05", "--metrics-address", "", "--max-passes", "1"])
    assert code == 0
    assert calls == EXPECTED


@pytest.mark.parametrize("command", [["history"], ["explain", "nothing"]])
def test_a_one_shot_command_makes_the_settings(tmp_path: Path, calls: list[tuple[int, int]],
                                               command: list[str]) -> None:
    main([*command, "--state-dir", str(tmp_path)])
    assert calls == EXPECTED


def test_completion_makes_none(calls: list[tuple[int, int]], capsys: pytest.CaptureFixture[str]) -> None:
    """Printing a completion script allocates nothing worth settling."""
    assert main(["completion", "bash"]) == 0
    assert calls == []
