"""The sale-composed truth table: how a linked order drives a registration.

One pure function. The sale seam mirrors the order's state and whether its
amount is zero onto the registration, then asks this table for the
registration's (state, sale_status). Heal-forward only: an `open` or `done`
row is never demoted to draft.
"""

from __future__ import annotations

from typing import Literal

from events_svc.models import RegistrationState

State = RegistrationState
SaleStatus = Literal["free", "sold", "to_pay"]
OrderState = Literal["draft", "sent", "sale", "cancel"]


def sale_composed_state(
    current: State,
    current_sale_status: SaleStatus | None,
    order_state: OrderState,
    amount_is_zero: bool,
) -> tuple[State, SaleStatus | None]:
    """(state, sale_status) of a registration linked to an order in `order_state`."""
    if order_state == "cancel":
        return "cancel", current_sale_status  # the whole linked group; sale_status kept
    if amount_is_zero:
        return ("open" if current == "draft" else current), "free"
    if order_state == "sale":
        return ("open" if current in ("draft", "cancel") else current), "sold"
    # draft/sent with an amount to pay: held in draft, never demoting open/done
    return ("draft" if current in ("draft", "cancel") else current), "to_pay"
