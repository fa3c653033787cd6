"""Standalone implementations of the host ports (used by `events-svc serve`)."""
