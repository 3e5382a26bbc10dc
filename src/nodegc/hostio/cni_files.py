"""The files CNI leaves on disk: host-local reservations and the libcni result cache.

Shared by the readers and the executors, which re-read the same files right before acting and must
understand them exactly as the readers did.
"""

from __future__ import annotations

CACHE_KIND = "cniCacheV1"
"""The `kind` of a libcni result cache entry."""
MAX_CACHE_BYTES = 1024 * 1024
MAX_RESERVATION_BYTES = 4096
IPAM_LOCK_NAME = "lock"
"""host-local's lock file in each network directory, flocked around every allocation and release."""
LAST_RESERVED_PREFIX = "last_reserved_ip."


def parse_reservation(content: bytes) -> tuple[str | None, str | None, bool]:
    """(container id, ifname, legacy) from `<cid>\\r\\n<ifname>` (current) or `<cid>` (before CNI 0.7)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"content is not valid UTF-8 (byte {e.start})") from e
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise ValueError("empty reservation file")
    if len(lines) > 2:
        raise ValueError(f"unexpected {len(lines)} lines, expected container id and interface name")
    container_id = lines[0]
    if not container_id:
        raise ValueError("empty container id")
    for value in lines:
        # isprintable() is false for every space but " ": together, no blank or control character at all.
        if not value.isprintable() or " " in value:
            raise ValueError(f"unexpected characters in {value!r}")
    if len(lines) == 2:
        return container_id, lines[1], False
    return container_id, None, True
