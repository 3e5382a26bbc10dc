"""The engine: runs the phase machine against the node, the desired state and the ledger."""
