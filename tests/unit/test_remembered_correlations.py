"""A remembered correlation is taken again only when a correlation from scratch would make its findings.

`planning.remembered.Correlations` gives the findings of a recent correlation when the records, the pods and
the policy compare equal and the clock (`planning.context.Clock`) shows that the new time answers every
question the verdicts asked of the time alike. Here: against correlations from scratch at times around
every threshold the generated scans' records sit at, with young records and without, with the runtime and
without, for detect's two passes; and the misses that must be misses.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import fields, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory, Kind, ReadProblem
from nodegc.planning.context import Clock, CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD

PLANNING = Path(__file__).parents[2] / "src" / "nodegc" / "planning"


def _aged(inv: Inventory, mtime: float) -> Inventory:
    """Every record of `inv` with an mtime of `mtime` (a quiet node: nothing young)."""
    changes: dict[str, object] = {}
    for f in fields(Inventory):
        value = getattr(inv, f.name)
        if isinstance(value, tuple) and value and hasattr(value[0], "mtime"):
            changes[f.name] = tuple(replace(r, mtime=mtime) for r in value)
    return replace(inv, **changes)  # type: ignore[arg-type]


def _scans(seed: int, runtime: bool) -> list[BigScan]:
    scan = big_scan(seed, sandboxes=150, runtime=runtime)
    quiet = BigScan(_aged(scan.inventory, OLD), scan.desired, scan.unread_netns)
    return [scan, quiet, adversarial_scan(seed, sandboxes=120, runtime=runtime)]


_PHOTO = (0, -1, -59, -60, -61, -299, -300, -301, -3539, -3540, -3541, -3600, -3660, -3661, -3900, -3901, -7200,
          5, 600)
_NOW = (0, 1, 60, 3600, -100)


def _times(seed: int) -> list[tuple[datetime, datetime]]:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    pairs = [(NOW + timedelta(seconds=p), NOW + timedelta(seconds=p)) for p in _PHOTO]
    pairs += [(NOW + timedelta(seconds=p + rnd.choice(_NOW)), NOW + timedelta(seconds=p)) for p in _PHOTO]
    rnd.shuffle(pairs)
    return [(NOW, NOW), *pairs, (NOW, NOW)]


@pytest.mark.parametrize("runtime", [False, True])
@pytest.mark.parametrize("min_age", [0.0, 60.0])
def test_taken_again_only_with_the_findings_of_a_fresh_correlation(runtime: bool, min_age: float) -> None:
    policy = CorrelationPolicy(min_age_seconds=min_age)
    taken = made = 0
    for i, scan in enumerate(_scans(3, runtime)):
        memo = Correlations(size=64)  # every time seen so far: each later one is checked against them all
        read = with_addresses_read(scan, i)
        for now, photo in _times(i):
            desired = replace(scan.desired, fetched_at=photo)
            before = memo.taken_again
            found, first = memo.correlate(scan.inventory, desired, now=now, policy=policy)
            assert found == correlate(scan.inventory, desired, now=now, policy=policy)
            again, _ = memo.correlate(read, desired, now=now, policy=policy, previous=first)
            assert again == correlate(read, desired, now=now, policy=policy)
            taken += memo.taken_again - before
            made += 2 - (memo.taken_again - before)
    assert taken and made  # both happened: the comparison has teeth


def test_a_quiet_nodes_steady_scans_are_taken_again_while_the_time_moves() -> None:
    """As the agent scans: every 30 s, with a desired state taken a moment before each scan."""
    scan = big_scan(4, sandboxes=120)
    quiet = _aged(scan.inventory, OLD)
    read = with_addresses_read(BigScan(quiet, scan.desired, scan.unread_netns), 4)
    policy = CorrelationPolicy()
    memo = Correlations()
    for k in range(6):
        now = NOW + timedelta(seconds=30 * k)
        desired = replace(scan.desired, fetched_at=now - timedelta(seconds=2))
        _, first = memo.correlate(quiet, desired, now=now, policy=policy)
        again, _ = memo.correlate(read, desired, now=now, policy=policy, previous=first)
        assert again == correlate(read, desired, now=now, policy=policy)
        assert memo.taken_again == 2 * k
    born = replace(quiet.pod_dirs[0], uid="young", path="/kubelet/pods/young", mtime=NOW.timestamp() + 150)
    young = replace(quiet, pod_dirs=(*quiet.pod_dirs, born))  # a pod directory of a pod not listed yet
    hits = []
    for k in range(6, 12):
        # Young until its age passes the minimum age counted back from the photo (cutoff 118, 148, 178 s
        # after NOW): its age note names the time, so each scan correlates anew; then the first scan that
        # sees it old enough correlates anew, and the next ones take that again.
        now = NOW + timedelta(seconds=30 * k)
        desired = replace(scan.desired, fetched_at=now - timedelta(seconds=2))
        before = memo.taken_again
        got, _ = memo.correlate(young, desired, now=now, policy=policy)
        assert got == correlate(young, desired, now=now, policy=policy)
        hits.append(memo.taken_again > before)
        verdict = next(f for f in got if f.id == born.path)
        assert verdict.cls.value == ("protected" if k < 8 else "orphaned_pod_dir")
    assert hits == [False, False, False, True, True, True]


def test_a_changed_record_pod_or_policy_is_correlated_anew() -> None:
    scan = big_scan(5, sandboxes=120)
    policy = CorrelationPolicy(min_age_seconds=60)
    memo = Correlations(size=1)
    memo.correlate(scan.inventory, scan.desired, now=NOW, policy=policy)
    inv = scan.inventory
    changed: list[tuple[Inventory, DesiredState, CorrelationPolicy]] = []
    for f in fields(Inventory):
        value = getattr(inv, f.name)
        if isinstance(value, tuple) and value:
            changed.append((replace(inv, **{f.name: value[1:]}), scan.desired, policy))  # type: ignore[arg-type]
            changed.append((replace(inv, **{f.name: (*value, value[0])}), scan.desired, policy))  # type: ignore[arg-type]
    changed.append((replace(inv, problems=(ReadProblem(Kind.CNI_CACHE, "/cni/results/x", "truncated"),)),
                    scan.desired, policy))
    changed.append((replace(inv, pod_dirs=(replace(inv.pod_dirs[0], mtime=inv.pod_dirs[0].mtime + 1),
                                           *inv.pod_dirs[1:])), scan.desired, policy))
    changed.append((inv, replace(scan.desired, pods=scan.desired.pods[1:]), policy))
    changed.append((inv, replace(scan.desired, pods=(replace(scan.desired.pods[0], phase="Failed"),
                                                     *scan.desired.pods[1:])), policy))
    changed.append((inv, replace(scan.desired, node="n2"), policy))
    changed.append((inv, scan.desired, CorrelationPolicy(min_age_seconds=61)))
    changed.append((inv, scan.desired, replace(policy, runtime_gave_up=frozenset({"x"}))))
    for inventory, desired, pol in changed:
        before = memo.taken_again
        got, made = memo.correlate(inventory, desired, now=NOW, policy=pol)
        assert memo.taken_again == before and made is not None
        assert got == correlate(inventory, desired, now=NOW, policy=pol)
        memo.correlate(scan.inventory, scan.desired, now=NOW, policy=policy)  # the original again
    again = memo.taken_again
    memo.correlate(replace(inv, taken_at=NOW + timedelta(seconds=30)), scan.desired, now=NOW, policy=policy)
    assert memo.taken_again == again + 1  # the inventory's own date is not read: the correlation's is `now`
    memo.forget()
    memo.correlate(scan.inventory, scan.desired, now=NOW, policy=policy)
    assert memo.taken_again == again + 1


def test_a_text_that_names_the_time_is_taken_again_only_at_that_time() -> None:
    scan = big_scan(6, sandboxes=120)  # young records: their evidence names their age
    policy = CorrelationPolicy(min_age_seconds=60)
    memo = Correlations()
    _, made = memo.correlate(scan.inventory, scan.desired, now=NOW, policy=policy)
    assert made is not None and made.context.clock.exact
    memo.correlate(scan.inventory, scan.desired, now=NOW + timedelta(seconds=1), policy=policy)
    assert memo.taken_again == 0
    memo.correlate(scan.inventory, scan.desired, now=NOW, policy=policy)
    assert memo.taken_again == 1


def test_the_clock_keeps_the_nearest_answer_of_each_question() -> None:
    since = Clock(now=1000.0, photo=900.0)  # thresholds: min(now, photo) - offset, 890 for an offset of 10
    assert since.since(890.0, 10) and since.since(950.0, 10) and not since.since(880.0, 10)
    assert not since.since(math.nan, 10)  # NaN answers no to every threshold: nothing to keep
    # yes for 890 and no for 880 hold for thresholds in (880, 890]
    assert [since.answers_alike(1000.0, p) for p in (900.0, 895.0, 890.1, 900.5, 890.0)] == [True] * 3 + [False] * 2
    assert since.answers_alike(5000.0, 900.0) and not since.answers_alike(879.0, 5000.0)  # min(now, photo)
    assert not since.answers_alike(math.nan, 900.0)
    after = Clock(now=1000.0, photo=900.0)
    assert after.after(891.0, 10) and not after.after(885.0, 10) and not after.after(890.0, 10)
    # yes for 891, no for 885 and 890: [890, 891)
    assert [after.answers_alike(1000.0, p) for p in (900.0, 900.9, 901.0, 899.9)] == [True, True, False, False]
    before = Clock(now=1000.0, photo=900.0)
    assert before.before(880.0, 10) and not before.before(890.0, 10) and not before.before(math.nan, 10)
    # yes for 880, no for 890: (880, 890]
    assert [before.answers_alike(1000.0, p) for p in (900.0, 890.1, 900.1, 890.0)] == [True, True, False, False]
    copied = since.copy()
    copied.exact = True
    assert not since.exact and since.answers_alike(1000.0, 895.0)
    assert not copied.answers_alike(1000.0, 895.0) and copied.answers_alike(1000.0, 900.0)
    assert Clock(now=1.0, photo=2.0).answers_alike(7.0, 8.0)  # asked nothing: any time answers alike


def test_the_runtimes_horizon_counts_back_from_the_oldest_of_the_three_times() -> None:
    """`viewed_after`: min(now, photo, read) less the offset; the view's read time answers alike only when
    each answer stays, and an exact clock only at the very same three times."""
    clock = Clock(now=1000.0, photo=900.0, read=800.0)  # threshold 790 for an offset of 10
    assert clock.viewed_after(791.0, 10) and not clock.viewed_after(790.0, 10)
    # yes for 791, no for 790: min(now, photo, read) in [800, 801)
    assert [clock.answers_alike(1000.0, 900.0, r) for r in (800.0, 800.9, 801.0, 799.9)] == [True, True, False, False]
    # without a view's date, no bound of its own
    assert clock.answers_alike(800.5, 5000.0, None) and not clock.answers_alike(1000.0, 900.0, None)
    assert clock.answers_alike(1000.0, 800.0, 5000.0) and not clock.answers_alike(799.9, 900.0, 800.0)
    undated = Clock(now=1000.0, photo=900.0)
    assert undated.viewed_after(891.0, 10) and not undated.viewed_after(890.0, 10)  # min(now, photo): [890, 891)
    assert undated.answers_alike(1000.0, 900.0, 900.5) and not undated.answers_alike(1000.0, 900.0, 899.0)
    assert not clock.copy().since(700.0, 10) and clock.copy().read == 800.0
    exact = Clock(now=1000.0, photo=900.0, exact=True, read=800.0)
    assert exact.answers_alike(1000.0, 900.0, 800.0)
    assert not exact.answers_alike(1000.0, 900.0, 800.5) and not exact.answers_alike(1000.0, 900.0, None)


def test_the_correlation_reads_the_time_only_through_its_clock() -> None:
    """The desired state's, the runtime view's and the inventory's own dates are not compared when a
    correlation is taken again: the planner reads the first only as the clock's `photo` and the second only
    as its `read` (Context.build), never the third, and no clock of its own."""
    for path in sorted(PLANNING.glob("*.py")):
        text = path.read_text()
        assert not re.search(r"\.now\(|\btime\(|utcnow|today\(", text), path
        if path.name == "remembered.py":
            continue
        assert "taken_at" not in text, path
        if path.name != "context.py":  # the time itself only through Context.now / Context.photo
            assert not re.search(r"clock\.(now|photo|exact|asked)\b", text), path
        expected = 1 if path.name == "context.py" else 0
        assert text.count("fetched_at") == expected, path
        assert text.count(".read_at") == 2 * expected, path  # `_read_at`: `view.read_at` tested, then read
        if path.name != "context.py":
            assert not re.search(r"clock\.read\b", text), path
    text = (PLANNING / "context.py").read_text()
    assert "Clock(now.timestamp(), desired.fetched_at.timestamp(), read=_read_at(inv))" in text
    assert text.count("_read_at(") == 2  # its definition and that one use


def test_a_correlation_taken_again_keeps_the_new_equal_inputs() -> None:
    """The scan makes its records anew and the source its pods: the remembered correlation then holds
    those (equal in all that is compared), so an older copy of the records and pods is not kept beside."""
    scan = big_scan(6, sandboxes=40)
    quiet = _aged(scan.inventory, OLD)
    policy = CorrelationPolicy()
    memo = Correlations()
    desired = replace(scan.desired, fetched_at=NOW - timedelta(seconds=2))
    found, _ = memo.correlate(quiet, desired, now=NOW, policy=policy)
    inventory = replace(quiet, pod_dirs=tuple(replace(p) for p in quiet.pod_dirs))  # equal, not the same
    later = replace(desired, pods=tuple(replace(p) for p in desired.pods), fetched_at=NOW + timedelta(seconds=28))
    again, made = memo.correlate(inventory, later, now=NOW + timedelta(seconds=30), policy=policy)
    assert made is None and again is found
    assert again == correlate(inventory, later, now=NOW + timedelta(seconds=30), policy=policy)
    (kept,) = memo._kept
    assert kept.inventory is inventory and kept.desired is later
    third, made = memo.correlate(quiet, desired, now=NOW + timedelta(seconds=60), policy=policy)
    assert made is None and third is found


def test_a_runtime_fed_quiet_nodes_scans_are_taken_again_while_the_views_time_moves() -> None:
    """The agent with a runtime socket: every scan reads the runtime's view anew, a moment before the
    scan's time. The same sandboxes at another read time take the correlation again; a sandbox born since
    is correlated anew, and judged by the view's time: old enough for the scan's time, not for the view's,
    it is kept."""
    scan = big_scan(4, sandboxes=120, runtime=True)  # an even seed: a sandbox for every running pod
    view = scan.inventory.runtime
    assert view is not None
    old = NOW - timedelta(seconds=3600)
    view = replace(view, sandboxes=tuple(replace(sb, created_at=old) for sb in view.sandboxes))
    quiet = replace(_aged(scan.inventory, OLD), runtime=view)
    read = with_addresses_read(BigScan(quiet, scan.desired, scan.unread_netns), 4)
    policy = CorrelationPolicy(min_age_seconds=60)
    memo = Correlations()

    def at(k: int, inv: Inventory, *, read_lag: float = 1.0) -> tuple[Inventory, DesiredState, datetime]:
        now = NOW + timedelta(seconds=30 * k)
        assert inv.runtime is not None
        return (replace(inv, runtime=replace(inv.runtime, read_at=now - timedelta(seconds=read_lag))),
                replace(scan.desired, fetched_at=now - timedelta(seconds=2)), now)

    for k in range(6):
        inv, desired, now = at(k, quiet)
        _, first = memo.correlate(inv, desired, now=now, policy=policy)
        again, _ = memo.correlate(at(k, read)[0], desired, now=now, policy=policy, previous=first)
        assert again == correlate(at(k, read)[0], desired, now=now, policy=policy)
        assert memo.taken_again == 2 * k
    born = replace(view.sandboxes[0], id="f" * 64, pod_uid="not-in-the-api", ready=False,
                   created_at=NOW + timedelta(seconds=200))
    young = replace(quiet, runtime=replace(view, sandboxes=(*view.sandboxes, born)))
    verdicts = []
    for k, read_lag in ((7, 1.0), (7, 1.0), (8, 1.0), (9, 30.0), (9, 1.0)):
        # born at +200 s: judged once min(now, photo, read) - 60 s passes it: at k=9 with a view read 1 s
        # before the scan (the photo's 268 s: 208 s), not with one read 30 s before (240 s: 180 s), which
        # answers as k=7 and k=8 did (148 s, 178 s): taken again
        inv, desired, now = at(k, young, read_lag=read_lag)
        before = memo.taken_again
        got, _ = memo.correlate(inv, desired, now=now, policy=policy)
        assert got == correlate(inv, desired, now=now, policy=policy)
        verdicts.append((memo.taken_again > before, next(f for f in got if f.id == born.id).cls.value))
    assert verdicts == [(False, "protected"), (True, "protected"), (True, "protected"), (True, "protected"),
                        (False, "orphaned_sandbox")]
