"""Findings: one inventoried resource joined with the pod it belongs to."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind


class FindingClass(StrEnum):
    IN_USE = "in_use"
    PROTECTED = "protected"
    ORPHANED_POD_DIR = "orphaned_pod_dir"
    ORPHANED_VOLUME_MOUNT = "orphaned_volume_mount"
    LEAKED_IP = "leaked_ip"
    STALE_CNI_CACHE = "stale_cni_cache"
    LEAKED_NETNS = "leaked_netns"
    DANGLING_VETH = "dangling_veth"
    LEAKED_CHAIN = "leaked_chain"
    LEAKED_HOSTPORT_RULE = "leaked_hostport_rule"
    ORPHANED_SANDBOX = "orphaned_sandbox"
    ORPHANED_POD_LOG_DIR = "orphaned_pod_log_dir"
    LEAKED_FIREWALL_RULE = "leaked_firewall_rule"
    RUNTIME_LEFTOVER = "runtime_leftover"
    """A sandbox directory, task bundle or shim of containerd's whose id the runtime does not list, that
    nodegc does not reclaim (a shim without --stop-orphan-shims, a directory something may still use or
    that cannot be reclaimed safely): reported only."""
    ORPHANED_RUNTIME_DIR = "orphaned_runtime_dir"
    """A containerd sandbox state directory or task bundle whose id the runtime does not list, that nothing
    uses any more: its shm or rootfs mount is unmounted and the directory removed."""
    ORPHANED_SHIM = "orphaned_shim"
    """A containerd shim process whose id the runtime does not list, stopped on opt-in (--stop-orphan-shims)."""
    RUNNING_ORPHAN = "running_orphan"
    """A READY sandbox of a pod gone from the API: reported (Event, metric), never stopped by default."""
    CONFLICT = "conflict"
    UNKNOWN = "unknown"

    @property
    def is_residue(self) -> bool:
        return self not in _NOT_RESIDUE


_NOT_RESIDUE = frozenset({FindingClass.IN_USE, FindingClass.PROTECTED, FindingClass.CONFLICT, FindingClass.UNKNOWN,
                          FindingClass.RUNNING_ORPHAN, FindingClass.RUNTIME_LEFTOVER})


@dataclass(frozen=True, slots=True)
class Owner:
    uid: str | None = None
    namespace: str | None = None
    name: str | None = None
    container_id: str | None = None

    def __init__(
        self,
        uid: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        container_id: str | None = None,
    ) -> None:
        # As Finding's: the generated frozen __init__, through the slots' own setters.
        _set_uid(self, uid)
        _set_namespace(self, namespace)
        _set_name(self, name)
        _set_container_id(self, container_id)

    def label(self) -> str:
        if self.namespace and self.name:
            return f"{self.namespace}/{self.name}"
        if self.uid:
            return f"uid:{self.uid}"
        if self.container_id:
            return f"container:{self.container_id[:12]}"
        return "(no owner)"


@dataclass(frozen=True, slots=True)
class Finding:
    cls: FindingClass
    kind: Kind
    id: str
    owner: Owner
    owner_state: OwnerState
    evidence: tuple[str, ...]
    netns: str | None = None
    ip: str | None = None
    sandbox: str | None = None
    """The sandbox id whose state in the container runtime this verdict rests on; terminate asks the
    runtime again (a fresh PodSandboxStatus) instead of the owner pod's phase."""

    def __init__(  # noqa: PLR0917 (the dataclass's fields, in order)
        self,
        cls: FindingClass,
        kind: Kind,
        id: str,
        owner: Owner,
        owner_state: OwnerState,
        evidence: tuple[str, ...],
        netns: str | None = None,
        ip: str | None = None,
        sandbox: str | None = None,
    ) -> None:
        # The generated __init__ of a frozen dataclass, but through the slots' own setters: a scan makes
        # thousands of findings, and object.__setattr__ by name costs a third more per finding.
        _set_cls(self, cls)
        _set_kind(self, kind)
        _set_id(self, id)
        _set_owner(self, owner)
        _set_owner_state(self, owner_state)
        _set_evidence(self, evidence)
        _set_netns(self, netns)
        _set_ip(self, ip)
        _set_sandbox(self, sandbox)

    @property
    def group_key(self) -> str:
        """Findings that belong to one pod or sandbox are shown and reclaimed together."""
        return self.owner.uid or self.owner.container_id or f"{self.kind}:{self.id}"


_slots = Finding.__dict__
_set_cls = _slots["cls"].__set__
_set_kind = _slots["kind"].__set__
_set_id = _slots["id"].__set__
_set_owner = _slots["owner"].__set__
_set_owner_state = _slots["owner_state"].__set__
_set_evidence = _slots["evidence"].__set__
_set_netns = _slots["netns"].__set__
_set_ip = _slots["ip"].__set__
_set_sandbox = _slots["sandbox"].__set__
_slots = Owner.__dict__
_set_uid = _slots["uid"].__set__
_set_namespace = _slots["namespace"].__set__
_set_name = _slots["name"].__set__
_set_container_id = _slots["container_id"].__set__
del _slots
