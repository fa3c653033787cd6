"""The sale-composed truth table, row by row (a pure function: no database)."""

from __future__ import annotations

import pytest

from events_svc.verbs.sale import sale_composed_state

ROWS = [
    # current, sale_status, order state, amount zero -> state, sale_status
    ("open", "sold", "cancel", False, "cancel", "sold"),
    ("draft", None, "cancel", True, "cancel", None),
    ("done", "to_pay", "cancel", False, "cancel", "to_pay"),
    ("draft", None, "draft", True, "open", "free"),
    ("draft", None, "sale", True, "open", "free"),
    ("open", None, "sent", True, "open", "free"),
    ("cancel", None, "draft", True, "cancel", "free"),
    ("draft", "to_pay", "sale", False, "open", "sold"),
    ("cancel", "to_pay", "sale", False, "open", "sold"),
    ("done", "to_pay", "sale", False, "done", "sold"),
    ("draft", None, "draft", False, "draft", "to_pay"),
    ("draft", None, "sent", False, "draft", "to_pay"),
    ("open", "free", "sent", False, "open", "to_pay"),  # heal-forward only: never demoted
    ("done", None, "draft", False, "done", "to_pay"),
]


@pytest.mark.parametrize(("current", "status", "order", "zero", "state", "sale_status"), ROWS)
def test_truth_table_row(current, status, order, zero, state, sale_status):
    assert sale_composed_state(current, status, order, zero) == (state, sale_status)
