"""Booth categories: company-shared configuration (like types and stages), each naming
the host's product a booth of it sells (`product_ref`). They are the generic
configuration verbs of `verbs.events.catalog`, driven by this noun's SQL. A category that
booths or type booth lines use cannot be deleted (409 booth_category_in_use, from its
RESTRICT keys).
"""

from __future__ import annotations

from events_svc.verbs.events import Noun

BOOTH_CATEGORIES = Noun(
    kind="booth_category",
    fields=("name", "description", "product_ref"),
    not_null=frozenset({"name", "description"}),
    order_key="name",
    key_type=str,
    get_sql="SELECT * FROM event.booth_categories WHERE id = $1",
    lock_sql="SELECT * FROM event.booth_categories WHERE id = $1 FOR UPDATE",
    list_sql="""
        SELECT * FROM event.booth_categories
        WHERE ($1::text IS NULL OR (name, id) > ($1, $2::uuid))
        ORDER BY name, id LIMIT $3""",
    insert_sql="""
        INSERT INTO event.booth_categories (name, description, product_ref, created_at,
            updated_at) VALUES ($1, $2, $3, $4, $4) RETURNING id""",
    update_sql="""
        UPDATE event.booth_categories SET name = $2, description = $3, product_ref = $4,
            updated_at = $5 WHERE id = $1 RETURNING id""",
    delete_sql="DELETE FROM event.booth_categories WHERE id = $1 RETURNING id",
)
