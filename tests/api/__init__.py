"""API tests against the HTTP-level fake Kubernetes API (tests/api/fakeapi.py)."""
