"""A lead walker in a process of its own (test_leads.py SIGKILLs it mid-pass): one lead
pass against DATABASE_URL with the signed webhook at HOOK_URL.

usage: python lead_walker.py DATABASE_URL HOOK_URL SECRET
"""

import asyncio
import sys
from datetime import UTC, datetime

from events_svc.adapters.lead_webhook import WebhookLeadSink
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.leads import LeadOptions, run_lead_pass


async def main(url: str, hook: str, secret: str) -> None:
    pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
    sink = WebhookLeadSink(hook, secret)
    try:
        await run_lead_pass(pool, sink, LeadOptions(), datetime.now(UTC))
    finally:
        await sink.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
