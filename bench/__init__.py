"""Benchmarks of events-svc (`make bench`)."""
