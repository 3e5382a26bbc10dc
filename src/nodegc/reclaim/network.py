"""The network reclaim executors, one import for the engine.

Each is idempotent, time-bounded and compares identity before acting; each returns an `Outcome` and
never raises for an expected failure. "Already gone" is success.
"""

from __future__ import annotations

from nodegc.reclaim.cni_del import cni_del
from nodegc.reclaim.ipam import release_ip
from nodegc.reclaim.netns import remove_netns
from nodegc.reclaim.rules import remove_rules
from nodegc.reclaim.veth import delete_veth

__all__ = ["cni_del", "delete_veth", "release_ip", "remove_netns", "remove_rules"]
