"""What the commands print when they stop: one `nodegc: ...` line on stderr, a `hint:` line where one helps."""

from __future__ import annotations

import os
import sys

from nodegc.exitcodes import EXIT_ERROR, EXIT_USAGE


def fail(message: str, *, hint: str | None = None, code: int = EXIT_ERROR) -> int:
    print(f"nodegc: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return code


def require_root(what: str) -> int | None:
    """None as root; else the usage exit after a message that says why root is needed."""
    if os.geteuid() == 0:
        return None
    return fail(f"{what} needs root: it reads the kubelet root and the CNI state, and runs iptables-save "
                "and the CNI plugins in the node's network namespace",
                hint="run it with sudo, or in the nodegc DaemonSet (kubectl -n nodegc-system exec ds/nodegc-agent "
                     "-- nodegc ...)", code=EXIT_USAGE)
