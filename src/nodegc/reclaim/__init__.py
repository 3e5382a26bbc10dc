"""Reclaim executors: one small module per kind, each idempotent, time-bounded and identity-checked."""
