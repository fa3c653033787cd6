"""The fixed notices a page shows after a form's 303 (`?done=<key>`): a key, never text
from the request, so nothing a visitor types is echoed into a page by a link."""

from __future__ import annotations

NOTICES: dict[str, str] = {
    "signed_in": "You are signed in.",
    "signed_out": "You are signed out.",
    "published": "The event is published.",
    "unpublished": "The event is no longer published.",
    "marked_done": "The event is marked done.",
    "corrected": "The correction is saved.",
    "cancelled": "The registration is cancelled.",
    "reactivated": "The registration is active again.",
    "import_started": "The import is queued; its rows are processed in batches.",
    "import_resumed": "The import was resumed.",
    "import_cancelled": "The import is cancelled; processed rows keep their outcome.",
    "operation_previewed": "Check the preview, then confirm to start.",
    "operation_started": "The operation started.",
    "operation_resumed": "The operation was resumed.",
    "operation_cancelled": "The operation is cancelled; triggers already written stay.",
    "template_saved": "The template is saved.",
    "outbox_retried": "The message is queued again and will be sent shortly.",
    "import_replayed": "This form was sent already: this is the import it started.",
    "waitlist_saved": "The waiting-list settings are saved.",
    "waitlist_offered": "The offer is made; its seats are held until its deadline.",
    "waitlist_removed": "The entry is off the waiting list; a held offer is released.",
    "webhook_saved": "The endpoint is saved.",
    "webhook_enabled": "The endpoint is enabled; deliveries resume.",
    "webhook_disabled": "The endpoint is disabled; nothing is sent to it until it is enabled.",
    "webhook_pinged": "A ping is queued; its attempt is in the delivery log.",
    "webhook_redelivered": "The message is queued again now, with the same message id.",
    "webhook_deleted": "The endpoint is deleted, with its messages and its delivery log.",
    "webhook_replayed": (
        "This form was sent already: this is the endpoint it made. Its secret was shown "
        "once; rotate the secret if you did not keep it."
    ),
}
