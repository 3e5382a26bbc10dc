"""The kubelet's on-disk layout that both the pod-directory reader and the executors rely on."""

from __future__ import annotations

import os
import re

PLAUSIBLE_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""Pod UIDs are UUIDs for API pods and hex hashes for static pods; allow a little more, never path syntax.
Use with fullmatch (a trailing newline is not a UID)."""
_CSI_PLUGIN = "kubernetes.io~csi"
_CSI_MOUNT_LEAF = "mount"


def csi_mount_point(path: str, *, plugin: str, subpath: bool) -> str | None:
    """Where a CSI volume is really mounted when nothing is at its directory: <name>/mount (vol_data.json
    sits beside it). None for any other volume. The reader and the unmount must agree on this."""
    if plugin == _CSI_PLUGIN and not subpath:
        return os.path.join(path, _CSI_MOUNT_LEAF)
    return None
