"""An item whose resource the scan did not show was closed as gone: "gone before it was reclaimed", or, for
one interrupted while TERMINATING, "removed by nodegc". A restart with another configuration (another
--kubelet-root, --netns-dir, --cni-data-dir or --pod-log-dir; no --runtime-endpoint any more) scans other
places or none: the resource is still where it was, outside what this scan looks at, and the ledger said
it was gone (and, for the interrupted step, that nodegc had removed it). Such an item is released, saying
why: nothing is concluded about a place the scan did not look at."""

from __future__ import annotations

from pathlib import Path

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import looked_in, scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.items import Item, Phase
from nodegc.model.resources import Inventory, Kind, PodDir
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy, Transition
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.found11.test_streaks_across_unknown import INTERVAL, Clock, Source
from tests.unit.factories import pod_dir


def _at(root: str, uid: str) -> PodDir:
    d = pod_dir(uid)
    return PodDir(uid=uid, path=f"{root}/pods/{uid}", inode=d.inode, mtime=d.mtime)


def _process(clock: Clock, db: Path, roots: Roots, dirs: tuple[PodDir, ...], cycles: int) -> Ledger:
    source = Source(clock)

    def scan(roots: Roots, opts: ScanOptions) -> Inventory:  # scan_node's statement of where it looked
        return Inventory(taken_at=clock.at(), pod_dirs=dirs, looked_in=looked_in(roots, opts))

    with Ledger(db) as ledger:
        engine = Engine(roots=roots, source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                                                correlation=CorrelationPolicy(min_age_seconds=0)),
                        metrics=Metrics(), clock=clock, scanner=scan, boot_clock=lambda: None)
        for _ in range(cycles):
            engine.cycle()
            clock.t += INTERVAL
    return ledger


def _dead(db: Path) -> tuple[Item, list[str]]:
    with Ledger(db) as ledger:
        item = next(i for i in ledger.items().values() if i.kind is Kind.POD_DIR and "u-dead" in i.resource_id)
        reasons = [h.reason for h in ledger.history(key=item.key)]
    return item, reasons


def test_a_marked_item_under_the_old_kubelet_root_is_not_called_gone(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    _process(clock, db, Roots(kubelet_root=Path("/kubelet")), (_at("/kubelet", "u-web"), _at("/kubelet", "u-dead")), 2)
    assert _dead(db)[0].phase is Phase.MARKED
    _process(clock, db, Roots(kubelet_root=Path("/srv/kubelet")), (_at("/srv/kubelet", "u-web"),), 1)
    item, reasons = _dead(db)
    assert item.phase is not Phase.CLOSED, reasons
    assert item.phase is Phase.RELEASED
    assert reasons[-1].startswith("not looked for") and "/srv/kubelet/pods" in reasons[-1], reasons


def test_an_interrupted_step_under_the_old_root_is_not_called_done(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    _process(clock, db, Roots(kubelet_root=Path("/kubelet")), (_at("/kubelet", "u-web"), _at("/kubelet", "u-dead")), 2)
    item, _ = _dead(db)
    with Ledger(db) as ledger:  # a crash right after the checkpoint, before the step
        ledger.apply([Transition(Item(**{**item.__dict__, "phase": Phase.TERMINATING}), item.phase, "re-verified")],
                     now=clock.t)
    _process(clock, db, Roots(kubelet_root=Path("/srv/kubelet")), (_at("/srv/kubelet", "u-web"),), 1)
    item, reasons = _dead(db)
    assert item.phase not in (Phase.CLOSED, Phase.CLEANED), reasons
    assert not any("removed by nodegc" in r for r in reasons), reasons


def test_an_item_under_the_same_root_still_closes(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    _process(clock, db, Roots(kubelet_root=Path("/kubelet")), (_at("/kubelet", "u-web"), _at("/kubelet", "u-dead")), 2)
    _process(clock, db, Roots(kubelet_root=Path("/kubelet")), (_at("/kubelet", "u-web"),), 1)
    item, reasons = _dead(db)
    assert item.phase is Phase.CLOSED and reasons[-1] == "gone before it was reclaimed"


def test_a_scan_says_where_it_looked(tmp_path: Path) -> None:
    root = tmp_path / "kubelet"
    (root / "pods").mkdir(parents=True)
    inv = scan_node(Roots(kubelet_root=root, cni_data_dir=tmp_path / "cni", netns_dir=tmp_path / "netns",
                          pod_log_dir=tmp_path / "logs", static_pod_dir=tmp_path / "manifests"), ScanOptions())
    assert (Kind.POD_DIR, str(root / "pods")) in inv.looked_in
    assert (Kind.NETNS, str(tmp_path / "netns")) in inv.looked_in
    assert inv.unread == {Kind.SANDBOX, Kind.RUNTIME_LEFTOVER}
