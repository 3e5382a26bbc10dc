"""Findings of a review of the whole change: each case that made a live pod's part look like residue, or
a stale or foreign view look usable, kept as a test."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.desired.snapshot import parse_snapshot
from nodegc.desired.source import SourceError
from nodegc.model.findings import FindingClass
from nodegc.model.items import Item, Phase, item_key
from nodegc.model.resources import FirewallRule, Inventory, Kind, ReadProblem
from nodegc.planning.correlate import correlate
from nodegc.planning.phases import Blind
from tests.unit.factories import NET, NOW, cache, desired, pod

RULE = FirewallRule(table="filter", chain="CNI-FORWARD", rule="-A CNI-FORWARD -s 10.0.0.5/32 -j ACCEPT",
                    ip="10.0.0.5", family=0)


def _firewall(inv: Inventory, *pods: object) -> FindingClass:
    found = correlate(inv, desired(*pods), now=NOW)  # type: ignore[arg-type]
    [rule] = [f for f in found if f.kind is Kind.FIREWALL_RULE]
    return rule.cls


def test_a_firewall_rule_of_an_address_a_kept_cache_entry_lists_is_kept() -> None:
    """A live pod's secondary address: in its cache entry, not in its status, its reservation unseen."""
    entry = dataclasses.replace(cache("c1", uid="u1", ip="10.0.0.2"), ips=("10.0.0.2", "10.0.0.5"))
    inv = Inventory(taken_at=NOW, cni_cache=(entry,), firewall_rules=(RULE,))
    assert not _firewall(inv, pod("p", "u1", ip="10.0.0.2")).is_residue


def test_a_firewall_rule_is_kept_while_reservations_cannot_be_read() -> None:
    problem = ReadProblem(Kind.IP_RESERVATION, f"/cni/networks/{NET}/10.0.0.5", "permission denied")
    inv = Inventory(taken_at=NOW, firewall_rules=(RULE,), problems=(problem,))
    assert _firewall(inv, pod("p", "u1", ip="10.0.0.2")) is FindingClass.PROTECTED


def test_a_snapshot_of_another_nodes_pods_is_refused() -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        {"metadata": {"name": "a", "namespace": "d", "uid": "u-a"}, "spec": {"nodeName": "n2"},
         "status": {"phase": "Running"}}]}
    with pytest.raises(SourceError, match="none of them on node n1"):
        parse_snapshot(json.dumps(doc).encode(), path=Path("pods.json"), node="n1", written=NOW, source="test")


def test_a_junk_pod_log_dir_name_does_not_hide_the_others() -> None:
    item = Item(key=item_key(Kind.POD_LOG_DIR, "/logs/d_a_u1"), kind=Kind.POD_LOG_DIR, resource_id="/logs/d_a_u1",
                phase=Phase.CLEANED, identity=(), finding_class="orphaned_pod_log_dir", owner_uid="u1",
                owner_namespace="d", owner_name="a", container_id=None, first_seen=0.0, last_seen=0.0,
                orphan_count=1)
    junk = ReadProblem(Kind.POD_LOG_DIR, "/logs/not-a-pod", "not named <namespace>_<name>_<uid>; skipped")
    assert not Blind((junk,)).hides(item)
    assert Blind((ReadProblem(Kind.POD_LOG_DIR, "/logs", "cannot list"),)).hides(item)


def test_a_bookmark_without_a_resource_version_does_not_make_the_view_fresh(tmp_path: Path) -> None:
    import threading

    from nodegc.api.reflector import _Run
    from nodegc.desired.reflector import PodReflector

    clock = [datetime(2026, 12, 1, 10, 0, tzinfo=UTC)]
    ref = PodReflector("n1", kubeconfig=tmp_path / "none", clock=lambda: clock[0])
    run = _Run(generation=ref._generation, stopping=threading.Event())
    ref._advance(run, "100")  # a list or an event the server vouches for
    clock[0] = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    ref._advance(run, None)  # a bookmark with no resourceVersion: no proof the server's cache moved
    assert ref.last_fresh() == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
