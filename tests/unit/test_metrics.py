"""Metrics: names and labels as documented, one registry per instance, and a real HTTP endpoint."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from nodegc.observe.metrics import Metrics


def _samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_metric_is_exposed_with_its_labels() -> None:
    m = Metrics()
    m.items({("pod_dir", "marked"): 3, ("netns", "detected"): 1})
    m.reclaimed("pod_dir", "ok")
    m.reclaimed("pod_dir", "ok")
    m.reclaimed("veth", "changed")
    m.scanned(0.2, [("pod_dir", 2), ("netns", 0)])
    m.blocked("stale_source")
    m.ledger_error()
    m.desired_age(12.5)
    s = _samples(m)
    assert s[("nodegc_items", (("kind", "pod_dir"), ("phase", "marked")))] == 3
    assert s[("nodegc_items", (("kind", "netns"), ("phase", "detected")))] == 1
    assert s[("nodegc_reclaims_total", (("kind", "pod_dir"), ("result", "ok")))] == 2
    assert s[("nodegc_reclaims_total", (("kind", "veth"), ("result", "changed")))] == 1
    assert s[("nodegc_scan_duration_seconds_count", ())] == 1
    assert s[("nodegc_scan_duration_seconds_sum", ())] == 0.2
    assert s[("nodegc_actions_blocked_total", (("reason", "stale_source"),))] == 1
    assert s[("nodegc_ledger_errors_total", ())] == 1
    assert s[("nodegc_read_problems_total", (("kind", "pod_dir"),))] == 2
    assert ("nodegc_read_problems_total", (("kind", "netns"),)) not in s
    assert s[("nodegc_desired_state_age_seconds", ())] == 12.5


def test_item_counts_that_disappear_drop_to_zero() -> None:
    m = Metrics()
    m.items({("pod_dir", "marked"): 3})
    m.items({("pod_dir", "cleaned"): 1})
    s = _samples(m)
    assert s[("nodegc_items", (("kind", "pod_dir"), ("phase", "marked")))] == 0
    assert s[("nodegc_items", (("kind", "pod_dir"), ("phase", "cleaned")))] == 1


def test_instances_have_separate_registries() -> None:
    a, b = Metrics(), Metrics()
    a.ledger_error()
    assert _samples(a)[("nodegc_ledger_errors_total", ())] == 1
    assert _samples(b)[("nodegc_ledger_errors_total", ())] == 0


def test_serve_exposes_the_registry_and_shuts_down() -> None:
    m = Metrics()
    m.blocked("blast_radius")
    server = m.serve("127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read().decode()
        assert 'nodegc_actions_blocked_total{reason="blast_radius"} 1.0' in body
    finally:
        server.shutdown()
    assert not server.thread.is_alive()


def test_hygiene_metrics_build_info_last_success_readiness_and_protected_apart_from_blocks() -> None:
    from nodegc import __version__

    m = Metrics()
    m.protected({"ip_reservation": 2})
    m.cycle_succeeded(1_700_000_000.0)
    ready = [True]
    m.readiness(lambda: (ready[0], "ok"))
    s = _samples(m)
    assert s[("nodegc_protected_resources", (("kind", "ip_reservation"),))] == 2
    assert s[("nodegc_protected_resources", (("kind", "netns"),))] == 0
    assert not [k for k in s if k[0] == "nodegc_actions_blocked_total" and ("reason", "protection") in k[1]]
    assert s[("nodegc_actions_blocked_total", (("reason", "blast_radius"),))] == 0  # exported from the start
    assert [k for k in s if k[0] == "nodegc_build_info" and ("version", __version__) in k[1]]
    assert s[("nodegc_last_successful_cycle_timestamp_seconds", ())] == 1_700_000_000.0
    assert s[("nodegc_ready", ())] == 1
    ready[0] = False
    assert _samples(m)[("nodegc_ready", ())] == 0
    m.protected({})
    assert _samples(m)[("nodegc_protected_resources", (("kind", "ip_reservation"),))] == 0


def test_range_series_follow_the_ranges_and_watch_counters_are_counters() -> None:
    import math

    from nodegc.model.ipranges import RangeForecast, RangeStatus, RangeUsage

    m = Metrics()
    usage = RangeUsage("net", "10.0.0.0/24", 253, 10, 7, 3)
    m.ranges([RangeStatus(usage, RangeForecast(leak_rate=0.001, new_leak_rate=0.002, allocation_rate=0.01))])
    key = (("network", "net"), ("range", "10.0.0.0/24"))
    s = _samples(m)
    assert (s[("nodegc_ip_range_capacity", key)], s[("nodegc_ip_range_reserved", key)],
            s[("nodegc_ip_range_live", key)], s[("nodegc_ip_range_leaked", key)]) == (253, 10, 7, 3)
    assert s[("nodegc_ip_range_leak_rate", key)] == 0.001
    assert math.isinf(s[("nodegc_ip_range_exhaustion_seconds", key)])
    m.ranges([])
    assert not [k for k in _samples(m) if k[0].startswith("nodegc_ip_range_")]
    m.watch_counters(lambda: {"lists": 3, "watches": 2, "relists_gone": 1, "resyncs": 4, "events_added": 5})
    s = _samples(m)
    assert s[("nodegc_reflector_lists_total", ())] == 3 and s[("nodegc_reflector_watches_total", ())] == 2
    assert s[("nodegc_reflector_relists_total", (("reason", "gone"),))] == 1
    assert s[("nodegc_reflector_relists_total", (("reason", "resync"),))] == 4
    assert s[("nodegc_reflector_events_total", (("type", "added"),))] == 5
    assert s[("nodegc_reflector_events_total", (("type", "bookmark"),))] == 0
    m.watch_counters(lambda: {"proofs": 7, "proofs_refused": 2, "proof_witness_reads": 3})
    s = _samples(m)
    assert s[("nodegc_reflector_proofs_total", (("result", "proven"),))] == 5
    assert s[("nodegc_reflector_proofs_total", (("result", "refused"),))] == 2
    assert s[("nodegc_reflector_proof_lease_reads_total", ())] == 3


def test_runtime_gauges_running_orphans_and_orphan_shims() -> None:
    m = Metrics()
    m.runtime(True, 1, orphan_shims=2)
    s = _samples(m)
    assert s[("nodegc_runtime_up", ())] == 1
    assert s[("nodegc_running_orphan_sandboxes", ())] == 1
    assert s[("nodegc_orphan_shims", ())] == 2
    m.runtime(None, 0)
    assert _samples(m)[("nodegc_orphan_shims", ())] == 0


def test_pod_dir_watch_state_and_fallbacks() -> None:
    from nodegc.inventory.pod_dirs import FALLBACK_REASONS
    from nodegc.observe.metrics import POD_DIR_WATCH_FALLBACKS

    assert POD_DIR_WATCH_FALLBACKS == FALLBACK_REASONS
    m = Metrics()
    m.pod_dir_watch(lambda: {"watching": 1, "fallbacks_watch_limit": 2})
    s = _samples(m)
    assert s[("nodegc_pod_dir_watch_active", ())] == 1
    assert s[("nodegc_pod_dir_watch_fallbacks_total", (("reason", "watch_limit"),))] == 2
    assert s[("nodegc_pod_dir_watch_fallbacks_total", (("reason", "inotify_unavailable"),))] == 0
    off = Metrics()
    off.pod_dir_watch(None)  # --no-watch-pod-dirs
    assert _samples(off)[("nodegc_pod_dir_watch_active", ())] == 0
