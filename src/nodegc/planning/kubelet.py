"""Correlation of the kubelet's objects: pod directories and the volumes mounted below them."""

from __future__ import annotations

from collections import defaultdict

from nodegc.model.findings import Finding, FindingClass, Owner
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
    owner, state, evidence = res.owner, res.state, res.evidence
    add = ctx.findings.append
    static = None
    if state is OwnerState.ABSENT:
        static = ctx.static_owner(uid=pod_dir.uid, namespace=owner.namespace, name=owner.name,
                                  containers=pod_dir.container_names, mtime=pod_dir.mtime)
    young = ctx.young(pod_dir.mtime) if state in GONE and static is None else False
    if static is not None:
        cls = FindingClass.PROTECTED
        add(Finding(cls, Kind.POD_DIR, pod_dir.path, owner, state, (*evidence, static)))
    elif state is OwnerState.ABSENT:
        if young:
            add(Finding(FindingClass.PROTECTED, Kind.POD_DIR, pod_dir.path, owner, state,
                        (*evidence, ctx.age_note(pod_dir.mtime))))
        elif pod_dir.mounts_below:
            add(Finding(FindingClass.ORPHANED_POD_DIR, Kind.POD_DIR, pod_dir.path, owner, state,
                        (*evidence, f"{len(pod_dir.mounts_below)} mounts still below it; removal waits for them")))
        else:
            add(Finding(FindingClass.ORPHANED_POD_DIR, Kind.POD_DIR, pod_dir.path, owner, state, evidence))
    else:
        # The kubelet removes a pod's directory only after the pod is deleted, terminal or not.
        add(Finding(FindingClass.IN_USE, Kind.POD_DIR, pod_dir.path, owner, state, evidence))
    if state not in GONE:
        for volume in pod_dir.volumes:
            if volume.mount_id is not None:
                add(Finding(FindingClass.IN_USE, Kind.VOLUME_MOUNT, volume.path, owner, state,
                            (*evidence, f"{volume.fs_type or '?'} mount id {volume.mount_id}")))
        return
    for volume in pod_dir.volumes:
        if volume.mount_id is None:
            continue
        vev = (*evidence, f"{volume.fs_type or '?'} mount id {volume.mount_id}")
        # Terminal pods no longer use volumes: the kubelet tears them down at termination.
        if static is not None:
            add(Finding(FindingClass.PROTECTED, Kind.VOLUME_MOUNT, volume.path, owner, state, (*vev, static)))
        elif young:
            # A mount carries no age; a pod newer than the pod list has a young directory.
            add(Finding(FindingClass.PROTECTED, Kind.VOLUME_MOUNT, volume.path, owner, state,
                        (*vev, "pod directory " + ctx.age_note(pod_dir.mtime))))
        else:
            add(Finding(FindingClass.ORPHANED_VOLUME_MOUNT, Kind.VOLUME_MOUNT, volume.path, owner, state, vev))


def _named(ctx: Context, res: Resolution, logs: dict[str, PodLogDir]) -> Resolution:
    """An absent owner known only by UID gets the namespace/name its cache entries or log directory give,
    so that terminate can ask the API for it: a list that silently left a live pod out is then caught by
    the live GET of that pod (same UID: it exists), not trusted."""
    uid = res.owner.uid
    for entry in ctx.cache.by_uid.get(uid or "", ()):
        if entry.pod_namespace and entry.pod_name:
            owner = Owner(uid, entry.pod_namespace, entry.pod_name, res.owner.container_id)
            return Resolution(owner, res.state, (*res.evidence, f"its cache entry names {owner.label()}"), res.pod)
    log_dir = logs.get(uid) if uid is not None else None
    if log_dir is not None:
        owner = Owner(uid, log_dir.namespace, log_dir.name, res.owner.container_id)
        return Resolution(owner, res.state, (*res.evidence, f"its log directory names {owner.label()}"), res.pod)
    return res


def _volume_conflicts(ctx: Context) -> None:
    """One exclusive block filesystem mounted into two live pods is reported, never reclaimed."""
    if not any(m.fs_type in _EXCLUSIVE_FS for m in ctx.inv.mounts):
        return  # no exclusive block filesystem is mounted at all
    mounts = {m.mount_id: m for m in ctx.inv.mounts}
    exclusive = {i for i, m in mounts.items() if m.fs_type in _EXCLUSIVE_FS}
    if not any(v.mount_id in exclusive for d in ctx.inv.pod_dirs for v in d.volumes):
        return  # no volume is on one (the node's root filesystem is, say, but no volume mount)
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
