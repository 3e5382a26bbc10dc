"""Kubernetes API writers of the controller and the agent: leader election, EndpointSlices, Events."""
