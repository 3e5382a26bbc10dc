"""The agent's config file is the operator's, yet a bad one must end in a one-line error and exit 2, never
a traceback or a hang: a YAML document nested deeper than the parser's recursion (RecursionError), an
integer of more digits than Python converts (ValueError from inside the YAML constructor), a value that is an
alias bomb (the error quoted its repr: gigabytes and minutes for a file of a few hundred bytes), and a path
that is a FIFO (the open blocked for good) or an endless device or a huge file (read to the end: memory
without bound). A device is refused by the same check as the FIFO, so no test reads /dev/zero."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from nodegc.cli import main
from tests.adversarial.found20_input.bombs import anchors, deep


def _run(cfg: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["agent", "--config", str(cfg)])
    return code, capsys.readouterr().err


def test_a_deeply_nested_config_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"interval: {deep(5000)}\n")
    code, err = _run(cfg, capsys)
    assert code == 2
    assert err.startswith(f"nodegc: {cfg}: ") and "nested too deeply" in err, err


def test_an_integer_of_too_many_digits_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("consecutiveScans: " + "9" * 5000 + "\n")
    code, err = _run(cfg, capsys)
    assert code == 2
    assert err.startswith(f"nodegc: {cfg}: ") and "digits" in err and len(err) < 500, err


@pytest.mark.parametrize("key", ["interval", "markRules"])
def test_an_alias_bomb_is_named_not_quoted(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    """Six levels (9**6 leaves, 2.6 MB of repr) keep the test quick on the old code; nine took minutes."""
    defs, _ = anchors(6)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"{key}: [{defs}]\n")
    code, err = _run(cfg, capsys)
    assert code == 2
    assert f"{key}" in err and len(err) < 500, err[:500]


def _bounded(cfg: Path, capsys: pytest.CaptureFixture[str], release: str | None = None) -> tuple[int, str]:
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(main(["agent", "--config", str(cfg)])), daemon=True)
    worker.start()
    worker.join(10)
    blocked = worker.is_alive()
    if release is not None and blocked:
        fd = os.open(release, os.O_WRONLY | os.O_NONBLOCK)  # let the blocked open go, so the thread ends
        os.close(fd)
        worker.join(10)
    assert not blocked and done, "the config read blocked"
    return done[0], capsys.readouterr().err


def test_a_fifo_config_is_refused_without_blocking(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agent.yaml"
    os.mkfifo(cfg)
    code, err = _bounded(cfg, capsys, release=str(cfg))
    assert code == 2 and "not a regular file" in err, err


def test_a_huge_config_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agent.yaml"
    with cfg.open("wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of NULs
    code, err = _run(cfg, capsys)
    assert code == 2 and "byte limit" in err, err


def test_a_config_reached_through_a_symlink_still_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ConfigMap volume mounts the file as a symlink into ..data: the config file is followed, as before."""
    (tmp_path / "..data").mkdir()
    (tmp_path / "..data" / "agent.yaml").write_text("interval: 0\n")
    (tmp_path / "agent.yaml").symlink_to("..data/agent.yaml")
    code, err = _run(tmp_path / "agent.yaml", capsys)
    assert code == 2 and "interval (line 1): must be > 0" in err, err
