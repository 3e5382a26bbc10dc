"""The iptables backend is detected as kube-proxy does, and the chains of a node whose rules live in the
legacy backend are found and removed there (real iptables-legacy and iptables-nft, in private netns)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio.iptables_backend import commands, detect, forget
from nodegc.inventory.scanning import scan_node
from nodegc.reclaim.rules import remove_rules
from nodegc.sandbox.node import SandboxNode
from nodegc.settings import ScanOptions

CID = "c0ffee" * 10 + "beef"
CHAIN = "CNI-0123456789abcdef01234567"


@pytest.fixture
def netns(tmp_path: Path) -> Iterator[Path]:
    """A network namespace of its own (a bind-mounted nsfs file), deleted afterwards."""
    name = f"nodegc-ipt-{tmp_path.name[-20:]}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        yield Path("/run/netns") / name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, timeout=30)
        forget()


def ipt(netns: Path, cmd: str, *args: str) -> None:
    subprocess.run(["nsenter", f"--net={netns}", cmd, *args], check=True, timeout=30, capture_output=True)


def plant_cni_chain(netns: Path, cmd: str) -> None:
    comment = f'name: "k8s-pod-network" id: "{CID}"'
    ipt(netns, cmd, "-t", "nat", "-N", CHAIN)
    ipt(netns, cmd, "-t", "nat", "-A", CHAIN, "-d", "10.22.0.0/16", "-m", "comment", "--comment", comment,
        "-j", "ACCEPT")
    ipt(netns, cmd, "-t", "nat", "-A", "POSTROUTING", "-s", "10.22.0.9/32", "-m", "comment", "--comment",
        comment, "-j", CHAIN)


def test_no_rules_anywhere_uses_the_images_iptables(netns: Path) -> None:
    assert detect(net_ns=netns)[0] == "default"


def test_more_legacy_rules_means_legacy(netns: Path) -> None:
    ipt(netns, "iptables-legacy", "-A", "INPUT", "-s", "10.1.0.1/32", "-j", "ACCEPT")
    ipt(netns, "iptables-legacy", "-A", "INPUT", "-s", "10.1.0.2/32", "-j", "ACCEPT")
    ipt(netns, "iptables-nft", "-A", "INPUT", "-s", "10.1.0.3/32", "-j", "ACCEPT")
    backend, why = detect(net_ns=netns)
    assert backend == "legacy", why


def test_kube_proxys_hint_chain_wins_over_counts(netns: Path) -> None:
    for i in range(3):
        ipt(netns, "iptables-legacy", "-A", "INPUT", "-s", f"10.1.0.{i + 1}/32", "-j", "ACCEPT")
    ipt(netns, "iptables-nft", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
    backend, why = detect(net_ns=netns)
    assert backend == "nft" and "KUBE-IPTABLES-HINT" in why


def test_a_legacy_node_has_its_chains_found_and_removed(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    netns = node.roots.net_ns
    assert netns is not None
    forget()
    plant_cni_chain(netns, "iptables-legacy")
    # The image's own iptables-save (nft on Debian) sees nothing: that is the bug the detection prevents.
    blind = scan_node(node.roots, ScanOptions(iptables_backend="nft"))
    assert CHAIN not in {c.name for c in blind.chains}
    seen = scan_node(node.roots, ScanOptions(iptables_backend="auto"))
    assert commands("auto", net_ns=netns).backend == "legacy"
    (chain,) = [c for c in seen.chains if c.name == CHAIN]
    assert chain.container_id == CID
    outcomes = remove_rules([chain], [], net_ns=netns, backend="auto")
    assert outcomes[CHAIN].ok, outcomes[CHAIN].detail
    after = subprocess.run(["nsenter", f"--net={netns}", "iptables-legacy-save", "-t", "nat"], check=True,
                           timeout=30, capture_output=True, text=True).stdout
    assert CHAIN not in after
