"""Fleet scale: caches that lose their watches in the same API outage must not come back in lock-step."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from nodegc.api.reflector import RESYNC_JITTER, RETRY_JITTER, backoff_delay
from nodegc.desired.reflector import PodReflector
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import pod

AGENTS = 1000


def test_retry_delays_are_spread_over_half_to_one_and_a_half_times_the_backoff() -> None:
    for failures, nominal in ((1, 1.0), (3, 4.0), (6, 30.0), (9, 30.0)):
        delays = [backoff_delay(failures, base=1.0, cap=30.0, rng=random.Random(agent))  # noqa: S311
                  for agent in range(AGENTS)]
        low, high = nominal * (1 - RETRY_JITTER), nominal * (1 + RETRY_JITTER)
        assert all(low <= d < high for d in delays)
        # Ten equal bins over the window each hold 5 to 15 % of the fleet: no lock-step, no pile-up.
        bins = [0] * 10
        for d in delays:
            bins[min(9, int((d - low) / (high - low) * 10))] += 1
        assert all(AGENTS * 0.05 <= b <= AGENTS * 0.15 for b in bins), bins
        assert statistics.pstdev(delays) > nominal * 0.25


def test_relists_after_a_fleet_wide_410_are_spread(tmp_path: Path) -> None:
    """Twelve nodes' watches get 410 at the same instant (a compaction): their relists spread over the
    relist window instead of arriving together."""
    spread = 1.0
    nodes = [f"node-{i}" for i in range(12)]
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=nodes) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        for node in nodes:
            api.add_pod(pod(f"p-{node}", node))
        refs = [PodReflector(node, kubeconfig=kubeconfig, resync_seconds=600.0, idle_timeout_seconds=5.0,
                             retry_seconds=0.05, max_retry_seconds=0.5, relist_spread_seconds=spread,
                             rng=random.Random(i)).start()  # noqa: S311
                for i, node in enumerate(nodes)]
        try:
            assert all(r.wait_synced(60) for r in refs)  # generous: a loaded 2-core machine
            assert api.wait_for(lambda: api.open_watches == len(nodes), timeout=60)
            api.clear_requests()
            api.compact()
            api.expire_watches()

            def first_relists() -> dict[str, float]:
                first: dict[str, float] = {}
                for request in api.recorded(method="GET", path_prefix="/api/v1/pods", watch=False):
                    first.setdefault(request.query.get("fieldSelector", ""), request.at)
                return first

            assert api.wait_for(lambda: len(first_relists()) == len(nodes), timeout=60)
            first = first_relists()
        finally:
            for r in refs:
                r.stop()
    assert len(first) == len(nodes)
    times = sorted(first.values())
    assert times[-1] - times[0] > spread * 0.3  # spread over the window, not one burst
    assert all(r.stats()["relists_gone"] >= 1 for r in refs)


def test_the_resync_period_is_stretched_per_cache() -> None:
    """Agents started together (a DaemonSet rollout) drift apart instead of relisting every 300 s at once."""
    delays = [PodReflector("node-a", resync_seconds=300.0, rng=random.Random(agent)).resync_delay()  # noqa: S311
              for agent in range(AGENTS)]
    assert all(300.0 <= d < 300.0 * (1 + RESYNC_JITTER) for d in delays)
    assert max(delays) - min(delays) > 300.0 * RESYNC_JITTER * 0.9
    assert len({round(d, 3) for d in delays}) > AGENTS * 0.9
