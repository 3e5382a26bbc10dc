"""Kubernetes API writers of the controller and the agent: leader election, EndpointSlices, Events.

They use the plumbing of `nodegc.api` (client, errors, object parsing)."""
