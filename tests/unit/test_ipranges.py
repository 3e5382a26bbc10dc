"""host-local ranges from the CNI configuration, range usage, the exhaustion forecast and node conditions."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from nodegc.inventory.cni_conf import RangeError, address_range, host_local_ranges, scan_ranges
from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.ipranges import RangeForecast, RangeStatus, RangeUsage
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.conditions import ip_range_pressure, node_conditions, reclaim_blocked
from nodegc.planning.ipranges import (
    RangeTracker,
    Sample,
    forecast,
    linear_exhaustion,
    range_usage,
    reclaim_urgency,
    theil_sen_slope,
)
from nodegc.sandbox.ipseries import evaluate
from tests.unit.factories import NET, NOW, cache, reservation


def _conflist(*range_sets: list[dict[str, str]], name: str = NET) -> dict[str, object]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "bridge", "ipam": {"type": "host-local", "ranges": list(range_sets)}},
        {"type": "portmap"}]}


# -- capacity, as host-local counts it ----------------------------------------------------------------


def test_capacity_of_a_slash_24_excludes_network_broadcast_and_gateway() -> None:
    r = address_range({"subnet": "10.244.1.0/24"})
    assert (r.start, r.end, r.gateway, r.capacity) == ("10.244.1.1", "10.244.1.254", "10.244.1.1", 253)


def test_capacity_with_a_range_start_end_and_a_gateway_outside() -> None:
    r = address_range({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.100", "rangeEnd": "10.0.0.199",
                       "gateway": "10.0.0.1"})
    assert r.capacity == 100


def test_ipv6_keeps_the_last_address() -> None:
    assert address_range({"subnet": "fd00::/120"}).capacity == 255 - 1  # ::1..::ff, gateway ::1 excluded


@pytest.mark.parametrize("spec", [{"subnet": "10.0.0.0/31"}, {"subnet": "bogus"}, {},
                                  {"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.5"},
                                  {"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.5"}])
def test_ranges_host_local_would_refuse_are_refused(spec: dict[str, str]) -> None:
    with pytest.raises(RangeError):
        address_range(spec)


def test_legacy_single_subnet_and_range_sets() -> None:
    legacy = {"name": "old", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}
    (r,), errors = host_local_ranges(legacy, source="conf")
    assert not errors and r.label == "10.1.0.0/24" and r.capacity == 253
    dual = _conflist([{"subnet": "10.2.0.0/24"}, {"subnet": "10.3.0.0/24"}], [{"subnet": "fd00::/120"}])
    ranges, errors = host_local_ranges(dual, source="conf")
    assert [x.label for x in ranges] == ["10.2.0.0/24,10.3.0.0/24", "fd00::/120"] and ranges[0].capacity == 506


def test_other_ipam_types_are_not_ranges() -> None:
    doc = {"name": "n", "plugins": [{"type": "bridge", "ipam": {"type": "dhcp"}}]}
    assert host_local_ranges(doc, source="conf") == ((), [])


def test_scan_reads_conf_dir_and_cached_configs_and_reports_bad_files(tmp_path: Path) -> None:
    (tmp_path / "10-net.conflist").write_text(json.dumps(_conflist([{"subnet": "10.244.0.0/24"}])))
    (tmp_path / "20-broken.conf").write_text("{not json")
    (tmp_path / "README").write_text("not a config")
    os.symlink("/etc/passwd", tmp_path / "30-link.conf")
    old = json.dumps(_conflist([{"subnet": "10.99.0.0/24"}]))
    entry = cache("c1", uid="u1")
    entry = dataclasses.replace(entry, config_json=old)
    ranges, problems = scan_ranges(tmp_path, [entry, entry])
    assert [(r.label, r.source) for r in ranges] == [("10.244.0.0/24", "conf"), ("10.99.0.0/24", "cache")]
    assert any("20-broken.conf" in p for p in problems) and any("30-link.conf" in p for p in problems)
    assert not any("README" in p for p in problems)


def test_a_range_kept_in_another_data_dir_is_left_out_with_a_reason(tmp_path: Path) -> None:
    doc = _conflist([{"subnet": "10.7.0.0/24"}])
    doc["plugins"][0]["ipam"]["dataDir"] = "/elsewhere/networks"  # type: ignore[index]
    (tmp_path / "10-net.conflist").write_text(json.dumps(doc))
    ranges, problems = scan_ranges(tmp_path, [], networks_dir=Path("/var/lib/cni/networks"))
    assert ranges == () and "/elsewhere/networks" in problems[0]
    doc["plugins"][0]["ipam"]["dataDir"] = "/var/lib/cni/networks/"  # type: ignore[index]
    (tmp_path / "10-net.conflist").write_text(json.dumps(doc))
    assert len(scan_ranges(tmp_path, [], networks_dir=Path("/var/lib/cni/networks"))[0]) == 1


def test_a_missing_conf_dir_is_no_problem(tmp_path: Path) -> None:
    assert scan_ranges(tmp_path / "absent", []) == ((), ())


def test_cached_config_round_trip_through_base64_is_what_the_reader_decodes() -> None:
    raw = json.dumps(_conflist([{"subnet": "10.5.0.0/24"}]))
    assert base64.b64decode(base64.b64encode(raw.encode())).decode() == raw


# -- usage --------------------------------------------------------------------------------------------


def _finding(cls: FindingClass, ip: str) -> Finding:
    return Finding(cls, Kind.IP_RESERVATION, f"{NET}/{ip}", Owner(), OwnerState.UNKNOWN, (), ip=ip)


def test_usage_splits_reserved_into_live_leaked_and_held() -> None:
    (rng,), _ = host_local_ranges(_conflist([{"subnet": "10.244.0.0/24"}]), source="conf")
    inv = Inventory(taken_at=NOW, ip_ranges=(rng,), ip_reservations=(
        reservation("10.244.0.2", "a"), reservation("10.244.0.3", "b"), reservation("10.244.0.4", "c"),
        reservation("10.9.9.9", "d"), reservation("10.1.1.1", "e", network="other")))
    findings = [_finding(FindingClass.IN_USE, "10.244.0.2"), _finding(FindingClass.LEAKED_IP, "10.244.0.3"),
                _finding(FindingClass.PROTECTED, "10.244.0.4"), _finding(FindingClass.LEAKED_IP, "10.9.9.9")]
    by_key = {u.key: u for u in range_usage(inv, findings)}
    main = by_key[(NET, "10.244.0.0/24")]
    assert (main.capacity, main.reserved, main.live, main.leaked, main.held) == (253, 3, 1, 1, 2)
    stray = by_key[(NET, "unknown")]
    assert (stray.capacity, stray.reserved, stray.leaked) == (None, 1, 1)
    assert by_key[("other", "unknown")].reserved == 1


# -- forecast -----------------------------------------------------------------------------------------


def _linear(rate_per_hour: float, *, hours: float = 1.0, held: int = 50, leaked0: int = 10) -> list[Sample]:
    out = []
    for i in range(int(hours * 120) + 1):
        t = i * 30.0
        out.append(Sample(at=t, reserved=held + leaked0 + int(rate_per_hour * t / 3600), held=held,
                          leaked=leaked0 + int(rate_per_hour * t / 3600)))
    return out


def test_a_steady_leak_gives_the_exact_time_to_exhaustion() -> None:
    series = _linear(12.0)
    f = forecast(series, 254)
    expected = (254 - 50 - series[-1].leaked) / (12.0 / 3600)
    assert f.leak_rate == pytest.approx(12.0 / 3600, rel=0.05)
    assert f.seconds_to_exhaustion == pytest.approx(expected, rel=0.05)


def test_no_leak_growth_never_runs_out_and_a_full_range_is_out_now() -> None:
    assert math.isinf(forecast(_linear(0.0), 254).seconds_to_exhaustion)
    assert forecast(_linear(0.0, held=240, leaked0=14), 254).seconds_to_exhaustion == 0.0
    assert math.isinf(forecast(_linear(5.0), None).seconds_to_exhaustion)
    assert math.isinf(forecast(_linear(5.0)[:1], 254).seconds_to_exhaustion)


def test_a_rollout_surge_does_not_look_like_a_trend() -> None:
    def surge(at: float) -> int:
        return 40 if at > 3000 else 0
    series = [Sample(at=s.at, reserved=s.reserved + surge(s.at), held=s.held + surge(s.at), leaked=s.leaked)
              for s in _linear(0.0)]
    assert math.isinf(forecast(series, 254).seconds_to_exhaustion)
    assert linear_exhaustion([(s.at, float(s.reserved)) for s in series], 254) < 6 * 3600  # the baseline is fooled


def test_theil_sen_ignores_a_reclaim_step() -> None:
    pts = [(float(t), float(t // 60)) for t in range(0, 3600, 30)]
    pts[-3:] = [(t, 0.0) for t, _ in pts[-3:]]
    assert theil_sen_slope(pts) == pytest.approx(1 / 60, rel=0.1)


def test_tracker_counts_allocations_and_new_leaks_and_keeps_the_window() -> None:
    tracker = RangeTracker(window_seconds=100)
    def usage(reserved: set[str], leaked: set[str]) -> RangeUsage:
        return RangeUsage(NET, "r", 10, len(reserved), 0, len(leaked), frozenset(leaked), frozenset(reserved))
    tracker.observe([usage({"a"}, set())], 0)
    (s,) = tracker.observe([usage({"a", "b", "c"}, {"a"})], 50)
    assert s.forecast.allocation_rate == pytest.approx(2 / 50) and s.forecast.new_leak_rate == pytest.approx(1 / 50)
    (s,) = tracker.observe([usage({"a", "b", "c"}, {"a", "b"})], 200)
    assert s.forecast.samples == 1
    assert tracker.observe([], 300) == ()


def test_synthetic_series_nodegc_forecasts_better_than_predict_linear() -> None:
    """Known exhaustion times; the figures are in docs/monitoring.md (bench/forecast.py prints them)."""
    result = evaluate(series=60, seed=1)
    ours, base = result["nodegc"], result["predict_linear"]
    assert isinstance(ours, dict) and isinstance(base, dict)
    assert ours["median_relative_error"] <= base["median_relative_error"]
    assert ours["p90_relative_error"] < base["p90_relative_error"]
    assert ours["alert_recall"] >= base["alert_recall"]


# -- reclaim order and conditions ---------------------------------------------------------------------


def _status(left: float, *, reserved: int = 10, capacity: int = 254, ips: tuple[str, ...] = ()) -> RangeStatus:
    u = RangeUsage(NET, f"r{left}", capacity, reserved, 0, reserved, frozenset(ips), frozenset(ips))
    return RangeStatus(u, RangeForecast(leak_rate=1 / 600, new_leak_rate=0, allocation_rate=0,
                                        seconds_to_exhaustion=left))


def test_reclaim_urgency_maps_addresses_to_their_range_forecast() -> None:
    urgency = reclaim_urgency([_status(100.0, ips=("10.0.0.1",)), _status(math.inf, ips=("10.0.1.1",))])
    assert urgency == {f"{NET}/10.0.0.1": (100.0, -10 / 254), f"{NET}/10.0.1.1": (math.inf, -10 / 254)}


def test_pressure_condition_is_set_by_a_forecast_or_a_full_range_and_cleared_otherwise() -> None:
    assert ip_range_pressure([_status(math.inf)]).status == "False"
    soon = ip_range_pressure([_status(3600.0)])
    assert (soon.status, soon.reason) == ("True", "RangeExhaustionForecast") and "full in about" in soon.message
    full = ip_range_pressure([_status(math.inf, reserved=240)])
    assert (full.status, full.reason) == ("True", "RangeNearlyFull")


def test_blocked_condition_names_the_refusal_and_ignores_throttling() -> None:
    assert reclaim_blocked(["rate_limit: global reclaim rate reached"]).status == "False"
    c = reclaim_blocked(["stale_source: desired state is 300s old"])
    assert (c.status, c.reason) == ("True", "StaleDesiredState") and "300s old" in c.message
    blocked, pressure = node_conditions(["blast_radius: 60% of owners orphaned"], [])
    assert blocked.reason == "BlastRadiusGuard" and pressure.status == "False"
    runtime = reclaim_blocked(["runtime_unavailable: no socket", "stale_source: 300s old"])
    assert runtime.reason == "StaleDesiredState"
    runtime = reclaim_blocked(["runtime_unavailable: the runtime lists no sandbox"])
    assert runtime.reason == "ContainerRuntimeUnavailable" and "container runtime's word" in runtime.message


def test_the_window_survives_a_restart_through_its_snapshot_and_nothing_stale_or_malformed_comes_back(
        tmp_path: Path) -> None:
    from nodegc.agent import RangeWindowFile

    def usage(leaked: int) -> RangeUsage:
        ips = frozenset(f"10.0.0.{i}" for i in range(leaked))
        return RangeUsage(NET, "10.0.0.0/24", 253, leaked + 50, 50, leaked, ips, ips)

    first = RangeTracker()
    for i in range(60):
        first.observe([usage(10 + i // 6)], 1000.0 + 30 * i)  # one leak a minute... every 3 minutes
    path = tmp_path / "ip-ranges.json"
    RangeWindowFile(path, first).save(force=True)

    second = RangeTracker()
    assert RangeWindowFile(path, second, clock=lambda: 1000.0 + 30 * 60).load() == 60
    (status,) = second.observe([usage(20)], 1000.0 + 30 * 60)
    assert status.forecast.samples == 61 and status.forecast.leak_rate > 0
    assert math.isfinite(status.seconds_to_exhaustion)

    # A window from long ago, from the future, or malformed rows: not restored.
    assert RangeTracker().restore(first.snapshot(), now=1000.0 + 30 * 60 + 7200) == 0
    assert RangeTracker().restore(first.snapshot(), now=0.0) == 0
    bad = {"version": 1, "series": [{"network": NET, "range": "r", "samples": [[1, 2], ["x"] * 6,
                                                                               [1e9, -1, 0, 0, 0, 0]]}, "junk"]}
    assert RangeTracker().restore(bad, now=1e9) == 0
    path.write_text("{not json")
    assert RangeWindowFile(path, RangeTracker()).load() == 0
    assert RangeWindowFile(tmp_path / "absent.json", RangeTracker()).load() == 0
