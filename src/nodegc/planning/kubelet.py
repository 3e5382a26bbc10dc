"""Correlation of the kubelet's objects: pod directories and the volumes mounted below them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind, PodDir, PodLogDir
from nodegc.planning.context import GONE, HOLDING, Context
from nodegc.planning.owners import Resolution

_EXCLUSIVE_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})


def correlate_kubelet(ctx: Context) -> None:
    logs: dict[str, PodLogDir] = {}
    for log_dir in ctx.inv.pod_logs:
        logs.setdefault(log_dir.uid, log_dir)  # the first of a UID, as a search would find it
    for pod_dir in ctx.inv.pod_dirs:
        _pod_dir(ctx, pod_dir, logs)
    _volume_conflicts(ctx)


def _pod_dir(ctx: Context, pod_dir: PodDir, logs: dict[str, PodLogDir]) -> None:
    res = ctx.pods.resolve_uid(pod_dir.uid)
    if res.state is OwnerState.ABSENT:
        res = _named(ctx, res, logs)
    evidence = res.evidence
    static = None
    if res.state is OwnerState.ABSENT:
        static = ctx.static_owner(uid=pod_dir.uid, namespace=res.owner.namespace, name=res.owner.name,
                                  containers=pod_dir.container_names, mtime=pod_dir.mtime)
    if static is not None:
        cls = FindingClass.PROTECTED
        evidence += (static,)
    elif res.state is OwnerState.ABSENT:
        if ctx.young(pod_dir.mtime):
            cls = FindingClass.PROTECTED
            evidence += (ctx.age_note(pod_dir.mtime),)
        else:
            cls = FindingClass.ORPHANED_POD_DIR
            if pod_dir.mounts_below:
                evidence += (f"{len(pod_dir.mounts_below)} mounts still below it; removal waits for them",)
    else:
        # The kubelet removes a pod's directory only after the pod is deleted, terminal or not.
        cls = FindingClass.IN_USE
    ctx.add(Finding(cls, Kind.POD_DIR, pod_dir.path, res.owner, res.state, evidence))
    for volume in pod_dir.volumes:
        if not volume.mounted:
            continue
        what = f"{volume.fs_type or '?'} mount id {volume.mount_id}"
        vev = (*res.evidence, what)
        # Terminal pods no longer use volumes: the kubelet tears them down at termination.
        vcls = FindingClass.ORPHANED_VOLUME_MOUNT if res.state in GONE else FindingClass.IN_USE
        if vcls.is_residue and static is not None:
            vcls, vev = FindingClass.PROTECTED, (*vev, static)
        elif vcls.is_residue and ctx.young(pod_dir.mtime):
            # A mount carries no age; a pod newer than the pod list has a young directory.
            vcls, vev = FindingClass.PROTECTED, (*vev, "pod directory " + ctx.age_note(pod_dir.mtime))
        ctx.add(Finding(vcls, Kind.VOLUME_MOUNT, volume.path, res.owner, res.state, vev))


def _named(ctx: Context, res: Resolution, logs: dict[str, PodLogDir]) -> Resolution:
    """An absent owner known only by UID gets the namespace/name its cache entries or log directory give,
    so that terminate can ask the API for it: a list that silently left a live pod out is then caught by
    the live GET of that pod (same UID: it exists), not trusted."""
    uid = res.owner.uid
    for entry in ctx.cache.by_uid.get(uid or "", []):
        if entry.pod_namespace and entry.pod_name:
            owner = replace(res.owner, namespace=entry.pod_namespace, name=entry.pod_name)
            return replace(res, owner=owner, evidence=(*res.evidence, f"its cache entry names {owner.label()}"))
    log_dir = logs.get(uid) if uid is not None else None
    if log_dir is not None:
        owner = replace(res.owner, namespace=log_dir.namespace, name=log_dir.name)
        return replace(res, owner=owner, evidence=(*res.evidence, f"its log directory names {owner.label()}"))
    return res


def _volume_conflicts(ctx: Context) -> None:
    """One exclusive block filesystem mounted into two live pods is reported, never reclaimed."""
    if not any(m.fs_type in _EXCLUSIVE_FS for m in ctx.inv.mounts):
        return  # no exclusive block filesystem is mounted at all
    mounts = {m.mount_id: m for m in ctx.inv.mounts}
    volume_mounts = {v.path: v.mount_id for d in ctx.inv.pod_dirs for v in d.volumes if v.mounted}
    holders: dict[str, list[int]] = defaultdict(list)
    for index, finding in enumerate(ctx.findings):
        if finding.kind is not Kind.VOLUME_MOUNT or finding.owner_state not in HOLDING:
            continue
        mount_id = volume_mounts.get(finding.id)
        mount = mounts.get(mount_id) if mount_id is not None else None
        if mount is not None and mount.fs_type in _EXCLUSIVE_FS:
            holders[f"{mount.device}:{mount.root}"].append(index)
    for device, indexes in holders.items():
        uids = {ctx.findings[i].owner.uid for i in indexes}
        if len(uids) < 2:
            continue
        for i in indexes:
            old = ctx.findings[i]
            note = f"device {device} is mounted by {len(uids)} live pods"
            ctx.findings[i] = Finding(
                FindingClass.CONFLICT, old.kind, old.id, old.owner, old.owner_state, (*old.evidence, note)
            )
