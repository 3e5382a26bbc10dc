"""The planner's fast paths decide exactly what the straightforward ones do, on big generated scans.

- detect's second correlation, which takes from the first what the namespaces' addresses cannot change,
  gives the findings a correlation from scratch gives;
- the decisions (class, kind, id, owner, owner state) on the generated scans are the ones recorded in
  tests/unit/fixtures/bigscan_decisions.json (a digest per scan), made by the planner before its indexes and caches
  (regenerate with NODEGC_REGENERATE=1 only for a deliberate change of a rule);
- the addresses read out of iptables rules are the ones the original regular expression finds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.findings import Finding
from nodegc.model.resources import Kind, ReadProblem
from nodegc.planning.correlate import CorrelationPolicy, correlate, correlation
from nodegc.planning.network import rule_ips
from nodegc.planning.owners import normalize_ip
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW

FIXTURE = Path(__file__).parent / "fixtures" / "bigscan_decisions.json"
CASES = [(seed, rt) for seed in range(4) for rt in (False, True)]


@pytest.mark.parametrize(("seed", "runtime"), CASES)
def test_second_pass_reuse_gives_the_findings_of_a_fresh_correlation(seed: int, runtime: bool) -> None:
    scan = big_scan(seed, runtime=runtime)
    policy = CorrelationPolicy(min_age_seconds=60)
    first = correlation(scan.inventory, scan.desired, now=NOW, policy=policy)
    assert first.findings == correlate(scan.inventory, scan.desired, now=NOW, policy=policy)
    read = with_addresses_read(scan, seed)
    assert read.netns != scan.inventory.netns
    again = correlation(read, scan.desired, now=NOW, policy=policy, previous=first)
    assert again.context.pods is first.context.pods  # the reuse did happen
    assert again.findings == correlate(read, scan.desired, now=NOW, policy=policy)


@pytest.mark.parametrize(("seed", "runtime"), [(seed, rt) for seed in range(4, 10) for rt in (False, True)])
def test_second_pass_reuse_on_adversarial_scans(seed: int, runtime: bool) -> None:
    """The verdicts a second pass takes from the first (cache entries, namespaces, veths whose netns
    records did not change) are the ones a correlation from scratch makes, on scans with re-created pods
    (same name, new UID), addresses claimed twice, namespaces named by two sandboxes or found under two
    keys; round after round, and when the previous pass saw another list of namespaces."""
    scan = adversarial_scan(seed, runtime=runtime)
    policy = CorrelationPolicy(min_age_seconds=60)
    previous = correlation(scan.inventory, scan.desired, now=NOW, policy=policy)
    assert previous.findings == correlate(scan.inventory, scan.desired, now=NOW, policy=policy)
    inventory = scan.inventory
    for round_ in range(3):
        inventory = with_addresses_read(BigScan(inventory, scan.desired, scan.unread_netns[round_::3]), seed + round_)
        again = correlation(inventory, scan.desired, now=NOW, policy=policy, previous=previous)
        assert again.context.pods is previous.context.pods
        assert again.findings == correlate(inventory, scan.desired, now=NOW, policy=policy)
        previous = again
    # two entries of one path: a namespace not read reads the verdict of a path whose last entry names one read
    unread = set(scan.unread_netns)
    twins = tuple(replace(e, netns=scan.unread_netns[i % len(scan.unread_netns)])
                  for i, e in enumerate(scan.inventory.cni_cache) if e.netns and e.netns not in unread)
    twice = replace(scan.inventory, cni_cache=(*scan.inventory.cni_cache, *twins))
    first = correlation(twice, scan.desired, now=NOW, policy=policy)
    read = with_addresses_read(BigScan(twice, scan.desired, scan.unread_netns), seed)
    assert correlation(read, scan.desired, now=NOW, policy=policy, previous=first).findings == correlate(
        read, scan.desired, now=NOW, policy=policy)
    fewer = replace(inventory, netns=inventory.netns[1:])
    again = correlation(fewer, scan.desired, now=NOW, policy=policy, previous=previous)
    assert again.context.pods is previous.context.pods
    assert again.findings == correlate(fewer, scan.desired, now=NOW, policy=policy)


def test_reuse_only_when_nothing_but_the_namespaces_changed() -> None:
    scan = big_scan(7)
    first = correlation(scan.inventory, scan.desired, now=NOW)
    changed = replace(scan.inventory, pod_dirs=scan.inventory.pod_dirs[1:])
    again = correlation(changed, scan.desired, now=NOW, previous=first)
    assert again.context.pods is not first.context.pods
    assert again.findings == correlate(changed, scan.desired, now=NOW)
    unreadable = replace(scan.inventory, problems=(*scan.inventory.problems,
                                                   ReadProblem(Kind.CNI_CACHE, "/cni/results/x", "truncated")))
    again = correlation(unreadable, scan.desired, now=NOW, previous=first)
    assert again.context.pods is not first.context.pods
    assert again.findings == correlate(unreadable, scan.desired, now=NOW)
    other_policy = correlation(scan.inventory, scan.desired, now=NOW, policy=CorrelationPolicy(min_age_seconds=1),
                               previous=first)
    assert other_policy.context.pods is not first.context.pods


def _decisions(findings: tuple[Finding, ...]) -> list[list[str | None]]:
    return [[f.cls.value, f.kind.value, f.id, f.owner.uid, f.owner.container_id, f.owner_state.value]
            for f in findings]


def _digest(findings: tuple[Finding, ...]) -> dict[str, object]:
    text = json.dumps(_decisions(findings))
    return {"findings": len(findings), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _all_decisions() -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    policy = CorrelationPolicy(min_age_seconds=60)
    for seed, runtime in CASES:
        scan = big_scan(seed, runtime=runtime)
        out[f"{seed}-{runtime}-scan"] = _digest(correlate(scan.inventory, scan.desired, now=NOW, policy=policy))
        read = with_addresses_read(scan, seed)
        out[f"{seed}-{runtime}-read"] = _digest(correlate(read, scan.desired, now=NOW, policy=policy))
    return out


def test_decisions_on_big_scans_are_the_recorded_ones() -> None:
    found = _all_decisions()
    if os.environ.get("NODEGC_REGENERATE"):
        FIXTURE.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    assert found == json.loads(FIXTURE.read_text())


_ORIGINAL = re.compile(r"(?:^|\s)(?:-s|-d|--to-destination)\s+\[?([0-9a-fA-F.:]+?)\]?(?:/(?:32|128))?(?::\d+)?(?=\s|$)")
_WORDS = ["-s", "-d", "--to-destination", " ", "  ", "\t", "\n", "\u00a0", "\u2028", "\x1c", "[", "]", "/32", "/128",
          "/16", ":80", ":", "::", "10.0.0.1", "fd00::1", "1.2.3.4", "a", "0", "-j", "x-d", "-dd", "\u0663",
          "::ffff:1.2.3.4", "1.2", '"', "-m comment --comment"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=14).map("".join))
def test_rule_addresses_are_the_original_expressions(text: str) -> None:
    expected = [ip for m in _ORIGINAL.finditer(text) if (ip := normalize_ip(m.group(1)))]
    assert list(rule_ips(text)) == expected
