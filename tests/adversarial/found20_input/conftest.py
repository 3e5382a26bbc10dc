"""These tests give commands bad files and expect a refusal before anything runs. Should a regression let a
bad config file through, `nodegc agent` must still not start here: as root it would use the default roots
(the machine's own kubelet root, netns dir and iptables), so the agent's entry point fails the test instead."""

from __future__ import annotations

from typing import Any

import pytest

import nodegc.agent


@pytest.fixture(autouse=True)
def no_agent_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> int:
        pytest.fail("the agent started: the config file was not refused")

    monkeypatch.setattr(nodegc.agent, "cmd_agent", refuse)
