"""READY sandboxes of pods the API no longer shows (`running_orphan`): counted from when this process
first saw each one, reported once absent longer than the long grace, and stopped only on opt-in.

Stopping is destructive and the workload is still running, so it takes every check a reclaim takes and
more: the cycle's guards passed, a live GET finds no pod with that UID, and a fresh PodSandboxStatus still
shows the same sandbox (same creation time) READY. Only StopPodSandbox is called: the sandbox then turns
NotReady and, one grace later, is an `orphaned_sandbox` removed through the usual phases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nodegc import defaults
from nodegc.inventory.cri.client import CRIError, RuntimeClient
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import Pod
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.engine")


@dataclass
class RunningOrphans:
    grace_seconds: float = defaults.RUNNING_ORPHAN_GRACE_SECONDS
    first_seen: dict[str, float] = field(default_factory=dict)

    def observe(self, findings: Iterable[Finding], now: float) -> list[Finding]:
        """The running orphans absent longer than the grace; forgets the ones no longer seen."""
        current = {f.id: f for f in findings if f.cls is FindingClass.RUNNING_ORPHAN}
        for sid in set(self.first_seen) - set(current):
            del self.first_seen[sid]
        due: list[Finding] = []
        for sid, f in current.items():
            first = self.first_seen.setdefault(sid, now)
            if now - first >= self.grace_seconds:
                due.append(f)
        return due


def stop_running_orphan(
    finding: Finding,
    *,
    endpoint: str,
    timeout: float,
    get_pod: Callable[[str, str], Pod | None],
) -> tuple[bool, str]:
    """(stopped, why). Any doubt, or any failure to ask, keeps the sandbox running."""
    ns, name, uid = finding.owner.namespace, finding.owner.name, finding.owner.uid
    if not (ns and name and uid):
        return False, "the sandbox names no pod namespace, name and uid"
    pod = get_pod(ns, name)
    if pod is not None and uid in (pod.uid, pod.static_uid):
        return False, f"pod {ns}/{name} with that uid exists again"
    try:
        with RuntimeClient(endpoint, timeout=timeout) as client:
            reply = client.sandbox_status(finding.id)
            if reply is None:
                return False, "the runtime no longer knows the sandbox"
            if reply.status.state != 0:
                return False, "the sandbox is no longer READY"
            if reply.status.metadata.uid != uid:
                return False, "the sandbox id now names another pod's sandbox"
            client.stop_sandbox(finding.id)
    except CRIError as e:
        return False, f"runtime: {e}"
    log.warning("running orphan stopped", sandbox=finding.id, owner=f"{ns}/{name}", owner_uid=uid)
    return True, "stopped through CRI StopPodSandbox"
