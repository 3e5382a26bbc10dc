"""Host tests create real mounts, namespaces, links and iptables chains, so they only run as root inside a
private mount and network namespace; under CI they must run, never silently skip."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.inventory.cri.runtimes import forget_readers
from nodegc.sandbox.containerd import SandboxContainerd, containerd_available
from nodegc.sandbox.node import SandboxNode, namespace_is_private
from nodegc.sandbox.reaper import start_reaper

_HOST_DIR = Path(__file__).parent.resolve()
_HOW = (
    "run through `make test` as root (host tests need "
    "`unshare --mount --net --propagation private -- bash -c 'ip link set lo up && exec pytest tests/host'`)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HOST_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.host)


def _why_not_isolated() -> str | None:
    if os.geteuid() != 0:
        return "host tests need root"
    if not namespace_is_private("mnt"):
        return "host tests need a private mount namespace"
    if not namespace_is_private("net"):
        return "host tests need a private network namespace"
    return None


@pytest.fixture(scope="session", autouse=True)
def host_isolation() -> None:
    reason = _why_not_isolated()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI host tests must run: {_HOW}", pytrace=False)
    pytest.skip(f"{reason}: {_HOW}")


@pytest.fixture
def sandbox_node(tmp_path: Path) -> Iterator[SandboxNode]:
    node = SandboxNode.create(tmp_path)
    try:
        yield node
    finally:
        node.close()


@pytest.fixture
def containerd_node(sandbox_node: SandboxNode) -> Iterator[tuple[SandboxNode, SandboxContainerd]]:
    """A sandbox node with a real containerd (CRI, runc, the real CNI plugins) of its own."""
    missing = containerd_available()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; under CI the runtime tests must run (make deps installs it)", pytrace=False)
        pytest.skip(missing)
    runtime = SandboxContainerd(sandbox_node)
    # A pytest killed outright (SIGKILL, OOM) runs no teardown: the reaper, in its own session, then ends
    # this containerd, its shims and containers, removes its cgroup and unmounts the node, as for `make demo`.
    reaper = start_reaper(root=sandbox_node.root, config=runtime.config, cgroup=runtime.cgroup_parent)
    try:
        runtime.start()
        yield sandbox_node, runtime
    finally:
        try:
            runtime.close()
            forget_readers()
            sandbox_node.close()  # idempotent: torn down with its own checks before the reaper looks
        finally:
            if reaper.stdin is not None:
                reaper.stdin.close()
            reaper.wait(timeout=60)
