"""EndpointSlices as the controller reasons about them, and the stale endpoints it finds in them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ENDPOINTSLICE_CONTROLLER = "endpointslice-controller.k8s.io"
# The mirroring controller rebuilds its slices from a selector-less Service's Endpoints object, so an
# endpoint removed from one of its slices comes back on its next sync: editing it would fight a controller.
MIRRORING_CONTROLLER = "endpointslicemirroring-controller.k8s.io"
CONTROLLER_MANAGERS = frozenset({ENDPOINTSLICE_CONTROLLER, MIRRORING_CONTROLLER})


@dataclass(frozen=True, slots=True)
class TargetRef:
    kind: str | None
    namespace: str | None
    name: str | None
    uid: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    target_ref: TargetRef | None = None
    node_name: str | None = None


@dataclass(frozen=True, slots=True)
class Slice:
    """One discovery.k8s.io/v1 EndpointSlice; `endpoints` keeps the API's order (indexes name them)."""

    namespace: str
    name: str
    resource_version: str | None
    address_type: str | None
    endpoints: tuple[Endpoint, ...]
    managed_by: str | None = None
    service_name: str | None = None
    uid: str | None = None

    @property
    def controller_managed(self) -> bool:
        return self.managed_by in CONTROLLER_MANAGERS

    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


class StaleReason(StrEnum):
    POD_MISSING = "pod_missing"
    UID_CHANGED = "uid_changed"
    POD_TERMINAL = "pod_terminal"
    ADDRESS_NOT_HELD = "address_not_held"


class StaleAction(StrEnum):
    REPORT = "report"  # a controller owns the slice: tell, never edit
    REMOVE = "remove"  # nobody reconciles the slice: the endpoint is removed under resourceVersion


@dataclass(frozen=True, slots=True)
class StaleEndpoint:
    slice_namespace: str
    slice_name: str
    index: int
    endpoint: Endpoint
    reason: StaleReason
    detail: str
    action: StaleAction
    managed_by: str | None = None
    service_name: str | None = None

    @property
    def pod_label(self) -> str:
        ref = self.endpoint.target_ref
        if ref is None:
            return "(no target)"
        return f"{ref.namespace or self.slice_namespace}/{ref.name or '?'}"
