"""The sale side: what the billing system tells us about orders, applied exactly once.

- `orders`: whose order a fact is about: an order is (company, order id), a platform
  actor's the company of the order's events;
- `inbox`: each order fact claimed once (its key per order company), its outcome
  recorded and answered again on a redelivery (`deliver`);
- `seam`: the three order facts (confirmed, paid, cancelled) and what each does to the
  order's registrations and booths;
- `truth`: the sale-composed truth table (the order's state onto a registration's);
- `linked_products`: the host products an event's tickets and booth categories name.
"""

from events_svc.verbs.sale.truth import sale_composed_state

__all__ = ["sale_composed_state"]
