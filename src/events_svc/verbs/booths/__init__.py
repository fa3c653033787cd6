"""Booths: the exhibition spaces of an event, their bookings and their categories.

- `records`: booths (create, read, list, patch, delete), the bookings the sale seam makes
  for an order line (`book_for_order_line`) and the paid latch (`latch_paid_booths`);
- `bookings`: the officer's booking, the exclusive confirm, release;
- `lines`: the order-line booking writes both share;
- `categories`: the company-shared booth categories.
"""

from events_svc.verbs.booths.categories import BOOTH_CATEGORIES
from events_svc.verbs.booths.records import book_for_order_line, latch_paid_booths

__all__ = ["BOOTH_CATEGORIES", "book_for_order_line", "latch_paid_booths"]
