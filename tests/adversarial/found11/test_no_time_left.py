"""A socket given a timeout of 0 turns non-blocking and a negative one raises ValueError: a caller whose
budget was spent got EAGAIN ("Resource temporarily unavailable", an OSError that reads as a failed read,
not as a timeout) or a traceback out of the netlink reader. Every such call fails as a timeout, with the
reason, before anything is sent."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nodegc.hostio.netlink import NetlinkError, RtnlSocket, nft_generation, open_many
from nodegc.inventory.cri.client import RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message_class
from tests.unit.fakecri import FakeRuntime

SPENT = [0.0, -1.0, -1e-9, math.nan]


@pytest.mark.parametrize("timeout", SPENT)
def test_a_netlink_socket_without_time_left_is_a_timeout(timeout: float) -> None:
    with pytest.raises(NetlinkError, match="no time left"):
        RtnlSocket.open(timeout=timeout)


@pytest.mark.parametrize("timeout", SPENT)
def test_namespace_sockets_without_time_left_each_say_why(timeout: float, tmp_path: Path) -> None:
    paths = [tmp_path / "a", tmp_path / "b"]
    out = open_many(paths, timeout=timeout)
    assert [type(o) for o in out] == [NetlinkError, NetlinkError]
    assert all("no time left" in str(o) and str(p) in str(o) for o, p in zip(out, paths, strict=True))


@pytest.mark.parametrize("timeout", SPENT)
def test_the_nft_generation_without_time_left_is_unknown(timeout: float) -> None:
    assert nft_generation(timeout=timeout) is None  # the caller reads the rules then


@pytest.mark.parametrize("timeout", SPENT)
def test_a_cri_call_without_time_left_is_deadline_exceeded(timeout: float, tmp_path: Path) -> None:
    path = tmp_path / "cri.sock"
    with FakeRuntime(path) as runtime, RuntimeClient(f"unix://{path}", timeout=5) as client:
        client.version()
        with pytest.raises(RuntimeUnavailable, match="no time left") as caught:
            client.call("Version", message_class("VersionRequest")(), "VersionResponse", timeout=timeout)
        assert caught.value.code == "DEADLINE_EXCEEDED"
        assert client.version() is not None  # the connection is still usable
    assert runtime is not None
