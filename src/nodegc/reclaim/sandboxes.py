"""Reclaiming a sandbox through the runtime itself: StopPodSandbox (the runtime's own teardown, CNI DEL
with its own configuration), then RemovePodSandbox. Both are idempotent; NOT_FOUND is "already gone"."""

from __future__ import annotations

from nodegc.inventory.cri.client import CRIError, RuntimeClient
from nodegc.model.runtime import RuntimeSandbox
from nodegc.reclaim.outcomes import Outcome


def remove_sandbox(sandbox: RuntimeSandbox, *, endpoint: str | None, timeout: float) -> Outcome:
    if not endpoint:
        return Outcome.failed("no runtime endpoint configured: sandboxes are only reclaimed through the runtime")
    try:
        with RuntimeClient(endpoint, timeout=timeout) as client:
            status = client.sandbox_status(sandbox.id)
            if status is None:
                return Outcome.gone("the runtime no longer knows the sandbox")
            if int(status.status.created_at) and sandbox.created_at is not None and abs(
                    int(status.status.created_at) / 1e9 - sandbox.created_at.timestamp()) > 1e-3:
                return Outcome.changed("the sandbox id now names another sandbox (another creation time)")
            if status.status.state == 0:
                return Outcome.changed("the sandbox is READY again")
            if not client.stop_sandbox(sandbox.id):
                return Outcome.gone("the runtime no longer knows the sandbox")
            client.remove_sandbox(sandbox.id)
    except CRIError as e:
        return Outcome.failed(f"runtime: {e}")
    return Outcome.done(f"stopped and removed sandbox {sandbox.id[:12]} through the runtime")
