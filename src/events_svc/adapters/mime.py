"""One outbox row as a MIME message (`email.message.EmailMessage`).

UTF-8 subject and body; a `text/plain` part, and beside it a `text/html` alternative when
the template rendered HTML (a body that starts with a tag and closes one), whose plain
part is then the HTML's text. Headers: `From` (`EVENTS_MAIL_FROM`), `To`, `Reply-To`
(the organiser, when the row names one other than the sender), `Subject`, `Date` (when
it is built), the row's fixed `Message-ID` and `Auto-Submitted: auto-generated`.
Attachments: stored files as they are (the dispatcher's calendar keeps its
`text/calendar; method=REQUEST|CANCEL`, so mail clients offer to update the calendar),
and references rendered now (`tickets_pdf`: the registration's tickets, from the
`TicketsPdf` port). A reference that cannot be rendered raises `AttachmentUnavailable`:
the message is not sent without it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from html.parser import HTMLParser
from uuid import UUID

from events_svc.ports import AttachmentUnavailable, QueuedMessage, TicketsPdf

_HTML = re.compile(r"^\s*<(!doctype|[a-z][a-z0-9]*)[\s>/]", re.IGNORECASE)
_CLOSED = re.compile(r"</[a-z][a-z0-9]*\s*>", re.IGNORECASE)
_BLOCKS = {"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table"}
_PARAM = re.compile(r"^\s*([a-z0-9-]+)\s*=\s*\"?([^\";]*)\"?\s*$", re.IGNORECASE)


def looks_like_html(body: str) -> bool:
    """A body a template rendered as HTML: it starts with a tag and closes one."""
    return bool(_HTML.match(body)) and bool(_CLOSED.search(body))


class _Text(HTMLParser):
    """The readable text of an HTML body (scripts and styles dropped, blocks on lines)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style"}:
            self.skipping += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style"} and self.skipping:
            self.skipping -= 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def html_text(body: str) -> str:
    parser = _Text()
    parser.feed(body)
    parser.close()
    return parser.text()


def _content_type(value: str) -> tuple[str, str, dict[str, str]]:
    """('text', 'calendar', {'method': 'REQUEST'}) of 'text/calendar; method=REQUEST'."""
    head, *params = value.split(";")
    maintype, _, subtype = head.strip().lower().partition("/")
    found = {}
    for param in params:
        match = _PARAM.match(param)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return maintype or "application", subtype or "octet-stream", found


async def build_message(
    message: QueuedMessage, mail_from: str, tickets: TicketsPdf, *, now_date: str | None = None
) -> EmailMessage:
    """The MIME message of one outbox row (raises AttachmentUnavailable)."""
    mime = EmailMessage(policy=SMTP)
    mime["From"] = mail_from
    mime["To"] = message.recipient
    # the organiser it was written for; a row queued before EVENTS_MAIL_FROM was set still
    # names the organiser as its sender
    reply_to = message.reply_to or message.sender
    if reply_to and reply_to != mail_from:
        mime["Reply-To"] = reply_to
    mime["Subject"] = " ".join(message.subject.split())  # a header never folds on user text
    mime["Date"] = now_date or format_datetime(datetime.now(UTC))
    mime["Message-ID"] = message.message_id
    mime["Auto-Submitted"] = "auto-generated"
    if looks_like_html(message.body):
        mime.set_content(html_text(message.body), charset="utf-8")
        mime.add_alternative(message.body, subtype="html", charset="utf-8")
    else:
        mime.set_content(message.body, charset="utf-8")
    for attachment in message.attachments:
        await _attach(mime, attachment, tickets)
    return mime


async def _attach(mime: EmailMessage, attachment: dict[str, object], tickets: TicketsPdf) -> None:
    if attachment.get("kind") == "tickets_pdf":
        registration = attachment.get("registration_id")
        try:
            registration_id = UUID(str(registration))
        except ValueError:
            raise AttachmentUnavailable("a tickets reference without a registration") from None
        pdf = await tickets.tickets_pdf(registration_id)
        filename = str(attachment.get("filename") or "tickets.pdf")
        mime.add_attachment(pdf, maintype="application", subtype="pdf", filename=filename)
        return
    content = attachment.get("content")
    if not isinstance(content, str):
        raise AttachmentUnavailable("an attachment without content")
    maintype, subtype, params = _content_type(str(attachment.get("content_type") or ""))
    filename = str(attachment.get("filename") or "attachment")
    if maintype == "text":
        mime.add_attachment(
            content, subtype=subtype, charset="utf-8", filename=filename, params=params
        )
    else:
        mime.add_attachment(
            content.encode(), maintype=maintype, subtype=subtype, filename=filename, params=params
        )
