"""Exit codes of every nodegc command (the README's table is this one)."""

from __future__ import annotations

EXIT_CLEAN = 0
"""Nothing to report: no residue, no conflict (agent and controller: a clean stop, SIGTERM included)."""
EXIT_ERROR = 1
"""An unexpected error (the ledger unreadable, a bug)."""
EXIT_USAGE = 2
"""A bad flag or config value, an unknown item, no ledger where one was named."""
EXIT_RESIDUE = 3
"""Residue or a conflict found (scan, clean dry run), or a reclaim step failed (clean --apply)."""
EXIT_SOURCE = 4
"""The desired state could not be read (API unreachable, snapshot unreadable)."""
EXIT_BLOCKED = 5
"""A safety guard refused to act (stale desired state, blast radius, the ledger held by another nodegc)."""
EXIT_NODE_UNSEEN = 6
"""`scan` cannot see the node: the kubelet root or CNI data dir is missing, or no pod directory exists while the
desired state lists running pods on the node (a wrong --kubelet-root, a container without the host mounts)."""
EXIT_INTERRUPTED = 130
"""SIGINT (Ctrl-C) in a one-shot command: 128 + SIGINT, as shells report it."""
