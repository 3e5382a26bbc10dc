"""How a reader words what it could not read: the reason of a ReadProblem."""

from __future__ import annotations

import os


def os_reason(e: OSError) -> str:
    return f"{e.strerror or type(e).__name__} (errno {e.errno})" if e.errno else str(e)


def symlink_reason(path: str) -> str:
    try:
        target = os.readlink(path)
    except OSError as e:
        return f"symlink (target unreadable: {os_reason(e)}), not followed"
    return f"symlink to {target}, not followed"
