"""The hand-declared CRI messages: wire compatibility and the parsing of status replies."""

from __future__ import annotations

import json

import pytest

from nodegc.inventory.cri.client import EndpointError, socket_path
from nodegc.inventory.cri.messages import SANDBOX_NOTREADY, message, message_class
from nodegc.inventory.cri.reading import sandbox_from_status


def _status(info: dict[str, str], *, state: int = 0, ip: str = "10.1.0.5") -> object:
    return message(
        "PodSandboxStatusResponse",
        status=message(
            "PodSandboxStatus", id="abc", state=state, created_at=1_700_000_000_000_000_000,
            metadata=message("PodSandboxMetadata", name="web", uid="u-1", namespace="ns", attempt=2),
            network=message("PodSandboxNetworkStatus", ip=ip, additional_ips=[message("PodIP", ip="fd00::5")]),
        ),
        info=info,
    )


def test_round_trip_and_unknown_fields_are_skipped() -> None:
    reply = _status({})
    data = reply.SerializeToString()  # type: ignore[attr-defined]
    # A field this table does not declare (containers_statuses = 3) is skipped, not an error.
    data += bytes([(3 << 3) | 2, 2, 0x0A, 0x00])
    back = message_class("PodSandboxStatusResponse").FromString(data)
    assert back.status.metadata.uid == "u-1" and back.status.network.additional_ips[0].ip == "fd00::5"


def test_containerd_verbose_info() -> None:
    info = {"info": json.dumps({
        "pid": 42, "netNamespaceClosed": False, "config": {"log_directory": "/var/log/pods/ns_web_u-1"},
        "runtimeSpec": {"linux": {"namespaces": [{"type": "pid"}, {"type": "network", "path": "/run/netns/cni-1"}]}},
    })}
    sb = sandbox_from_status(_status(info))
    assert (sb.id, sb.pod_uid, sb.attempt, sb.ready) == ("abc", "u-1", 2, True)
    assert sb.ips == ("10.1.0.5", "fd00::5") and sb.netns_path == "/run/netns/cni-1"
    assert sb.pid == 42 and sb.netns_closed is False and sb.log_directory == "/var/log/pods/ns_web_u-1"
    assert sb.created_at is not None and sb.created_at.year == 2023


@pytest.mark.parametrize("info", [
    {}, {"info": "{not json"}, {"info": json.dumps([1, 2])}, {"info": json.dumps({"pid": "7", "runtimeSpec": 3})},
    {"info": json.dumps({"runtimeSpec": {"linux": {"namespaces": [{"type": "network", "path": 5}]}}})},
])
def test_unreadable_info_leaves_facts_unknown(info: dict[str, str]) -> None:
    sb = sandbox_from_status(_status(info, state=SANDBOX_NOTREADY, ip=""))
    assert not sb.ready and sb.netns_path is None and sb.pid is None and sb.ips == ("fd00::5",)


def test_endpoints() -> None:
    assert str(socket_path("unix:///run/containerd/containerd.sock")) == "/run/containerd/containerd.sock"
    assert str(socket_path("/var/run/crio/crio.sock")) == "/var/run/crio/crio.sock"
    for bad in ("tcp://127.0.0.1:1234", "unix://relative", "npipe:////./pipe/x", ""):
        with pytest.raises(EndpointError):
            socket_path(bad)
