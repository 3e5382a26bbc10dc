"""The CRI (runtime.v1) messages nodegc reads and sends, built at import time from field tables.

Only the fields nodegc uses are declared: protobuf skips unknown fields on the wire, so a runtime that
sends more (containers' statuses, stats, newer fields) is read without them. Field numbers and types are
those of the CRI spec (k8s.io/cri-api, pkg/apis/runtime/v1/api.proto); enums are declared as int32,
which has the same wire encoding. The sandbox helpers (tests, demo) use the few write messages at the end.

The classes are built on the first `message` or `message_class` call, not at import: protobuf is loaded
only on a node whose runtime nodegc actually asks.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2

PACKAGE = "runtime.v1"
SERVICE = f"/{PACKAGE}.RuntimeService"

# State enums (PodSandboxState, ContainerState), as numbers.
SANDBOX_READY = 0
SANDBOX_NOTREADY = 1
CONTAINER_CREATED = 0
CONTAINER_RUNNING = 1
CONTAINER_EXITED = 2
CONTAINER_UNKNOWN = 3

# name -> fields (name, number, type). A type is a scalar, a message name, "*T" for repeated T, or
# "map" for map<string, string>.
_Fields = tuple[tuple[str, int, str], ...]
_MESSAGES: dict[str, _Fields] = {
    "VersionRequest": (("version", 1, "string"),),
    "VersionResponse": (
        ("version", 1, "string"), ("runtime_name", 2, "string"), ("runtime_version", 3, "string"),
        ("runtime_api_version", 4, "string"),
    ),
    "PodSandboxMetadata": (
        ("name", 1, "string"), ("uid", 2, "string"), ("namespace", 3, "string"), ("attempt", 4, "uint32"),
    ),
    "PodSandboxStateValue": (("state", 1, "int32"),),
    "PodSandboxFilter": (("id", 1, "string"), ("state", 2, "PodSandboxStateValue"), ("label_selector", 3, "map")),
    "ListPodSandboxRequest": (("filter", 1, "PodSandboxFilter"),),
    "PodSandbox": (
        ("id", 1, "string"), ("metadata", 2, "PodSandboxMetadata"), ("state", 3, "int32"),
        ("created_at", 4, "int64"), ("labels", 5, "map"), ("annotations", 6, "map"),
        ("runtime_handler", 7, "string"),
    ),
    "ListPodSandboxResponse": (("items", 1, "*PodSandbox"),),
    "PodSandboxStatusRequest": (("pod_sandbox_id", 1, "string"), ("verbose", 2, "bool")),
    "PodIP": (("ip", 1, "string"),),
    "PodSandboxNetworkStatus": (("ip", 1, "string"), ("additional_ips", 2, "*PodIP")),
    "NamespaceOption": (
        ("network", 1, "int32"), ("pid", 2, "int32"), ("ipc", 3, "int32"), ("target_id", 4, "string"),
    ),
    "Namespace": (("options", 2, "NamespaceOption"),),
    "LinuxPodSandboxStatus": (("namespaces", 1, "Namespace"),),
    "PodSandboxStatus": (
        ("id", 1, "string"), ("metadata", 2, "PodSandboxMetadata"), ("state", 3, "int32"),
        ("created_at", 4, "int64"), ("network", 5, "PodSandboxNetworkStatus"),
        ("linux", 6, "LinuxPodSandboxStatus"), ("labels", 7, "map"), ("annotations", 8, "map"),
        ("runtime_handler", 9, "string"),
    ),
    "PodSandboxStatusResponse": (("status", 1, "PodSandboxStatus"), ("info", 2, "map"), ("timestamp", 4, "int64")),
    "StopPodSandboxRequest": (("pod_sandbox_id", 1, "string"),),
    "StopPodSandboxResponse": (),
    "RemovePodSandboxRequest": (("pod_sandbox_id", 1, "string"),),
    "RemovePodSandboxResponse": (),
    "ContainerMetadata": (("name", 1, "string"), ("attempt", 2, "uint32")),
    "ImageSpec": (("image", 1, "string"),),
    "ContainerStateValue": (("state", 1, "int32"),),
    "ContainerFilter": (
        ("id", 1, "string"), ("state", 2, "ContainerStateValue"), ("pod_sandbox_id", 3, "string"),
        ("label_selector", 4, "map"),
    ),
    "ListContainersRequest": (("filter", 1, "ContainerFilter"),),
    "Container": (
        ("id", 1, "string"), ("pod_sandbox_id", 2, "string"), ("metadata", 3, "ContainerMetadata"),
        ("image", 4, "ImageSpec"), ("image_ref", 5, "string"), ("state", 6, "int32"), ("created_at", 7, "int64"),
        ("labels", 8, "map"), ("annotations", 9, "map"),
    ),
    "ListContainersResponse": (("containers", 1, "*Container"),),
    # Written only by the sandbox helpers (what a kubelet sends to start pods).
    "PortMapping": (
        ("protocol", 1, "int32"), ("container_port", 2, "int32"), ("host_port", 3, "int32"), ("host_ip", 4, "string"),
    ),
    "LinuxSandboxSecurityContext": (("namespace_options", 1, "NamespaceOption"),),
    "LinuxPodSandboxConfig": (("cgroup_parent", 1, "string"), ("security_context", 2, "LinuxSandboxSecurityContext")),
    "PodSandboxConfig": (
        ("metadata", 1, "PodSandboxMetadata"), ("hostname", 2, "string"), ("log_directory", 3, "string"),
        ("port_mappings", 5, "*PortMapping"), ("labels", 6, "map"), ("annotations", 7, "map"),
        ("linux", 8, "LinuxPodSandboxConfig"),
    ),
    "RunPodSandboxRequest": (("config", 1, "PodSandboxConfig"), ("runtime_handler", 2, "string")),
    "RunPodSandboxResponse": (("pod_sandbox_id", 1, "string"),),
    "ContainerConfig": (
        ("metadata", 1, "ContainerMetadata"), ("image", 2, "ImageSpec"), ("command", 3, "*string"),
        ("args", 4, "*string"), ("labels", 9, "map"), ("annotations", 10, "map"), ("log_path", 11, "string"),
    ),
    "CreateContainerRequest": (
        ("pod_sandbox_id", 1, "string"), ("config", 2, "ContainerConfig"), ("sandbox_config", 3, "PodSandboxConfig"),
    ),
    "CreateContainerResponse": (("container_id", 1, "string"),),
    "StartContainerRequest": (("container_id", 1, "string"),),
    "StartContainerResponse": (),
}


def _map_entry(msg: descriptor_pb2.DescriptorProto, field_name: str, fdp: Any) -> str:
    entry = msg.nested_type.add()
    entry.name = "".join(part.capitalize() for part in field_name.split("_")) + "Entry"
    entry.options.map_entry = True
    for name, number in (("key", 1), ("value", 2)):
        f = entry.field.add()
        f.name, f.number, f.type, f.label = name, number, fdp.TYPE_STRING, fdp.LABEL_OPTIONAL
    return f".{PACKAGE}.{msg.name}.{entry.name}"


def _build() -> dict[str, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FieldDescriptorProto
    scalars = {
        "string": fdp.TYPE_STRING, "bool": fdp.TYPE_BOOL, "int32": fdp.TYPE_INT32, "int64": fdp.TYPE_INT64,
        "uint32": fdp.TYPE_UINT32,
    }
    file_proto = descriptor_pb2.FileDescriptorProto(name="nodegc/cri.proto", package=PACKAGE, syntax="proto3")
    for msg_name, fields in _MESSAGES.items():
        msg = file_proto.message_type.add(name=msg_name)
        for name, number, type_ in fields:
            f = msg.field.add(name=name, number=number)
            repeated = type_.startswith("*") or type_ == "map"
            f.label = fdp.LABEL_REPEATED if repeated else fdp.LABEL_OPTIONAL
            base = type_.lstrip("*")
            if base == "map":
                f.type, f.type_name = fdp.TYPE_MESSAGE, _map_entry(msg, name, fdp)
            elif base in scalars:
                f.type = scalars[base]
            else:
                f.type, f.type_name = fdp.TYPE_MESSAGE, f".{PACKAGE}.{base}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in _MESSAGES
    }


_CLASSES: dict[str, Any] | None = None
_build_lock = threading.Lock()


def _classes() -> dict[str, Any]:
    global _CLASSES  # noqa: PLW0603 - built once, on first use
    classes = _CLASSES
    if classes is None:
        with _build_lock:  # the scan's thread and the engine's may ask at once: one pool, one set of classes
            if _CLASSES is None:
                _CLASSES = _build()
            classes = _CLASSES
    return classes


def message(type_name: str, /, **fields: Any) -> Any:
    """A new CRI message of type `type_name` (a key of the table above), fields set from keyword arguments."""
    return _classes()[type_name](**fields)


def message_class(name: str) -> Any:
    return _classes()[name]
