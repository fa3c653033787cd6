"""Verbs: one async function per behaviour, one transaction each, SQL beside it."""
