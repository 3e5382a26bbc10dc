"""Gaps found in review 14: the agent's cgroup view, netlink dump bounds, TLS handshake bounds, cmdline reads."""
