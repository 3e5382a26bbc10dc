"""nodegc: find and reclaim what dead pods leave behind on a Kubernetes node."""

__version__ = "0.1.0"
