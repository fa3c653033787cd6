"""The loop and its passes: everything the service does in the background.

- `passes`: what a pass is (`Pass`, `Ran`, `PassReport`), and the one way any entry point
  runs one (`run_pass`, bounded in time);
- `compose`: the one composition of the passes (and the outbound channels beside them),
  in its order, and a run's answer;
- `loop`: the one `Loop`: every pass in a lane of its own (tick, wake, back-offs, stop);
- `listen`: its LISTEN connection, opened again after a loss;
- `scheduled`: the scheduler's passes (offers, mail, leads, imports, operations,
  dispatch, sweep) over their verbs;
- `delivery`: the outbox's pass (the drainer: pacing, relay pauses, retries);
- `webhooks`: the webhooks' pass (attempts in flight, yielding to requests).
"""

from events_svc.loops.compose import CHANNELS, PASSES, Composition, compose_passes, run_view
from events_svc.loops.delivery import DeliveryPass, Drainer, DrainOptions, DrainSummary
from events_svc.loops.loop import Lane, Loop
from events_svc.loops.passes import LOOP, Entry, Pass, PassReport, Ran, run_pass, within
from events_svc.loops.scheduled import Services, next_sweep, offer_options, pass_options
from events_svc.loops.webhooks import WebhookOptions, WebhookPass

__all__ = [
    "CHANNELS",
    "LOOP",
    "PASSES",
    "Composition",
    "DeliveryPass",
    "DrainOptions",
    "DrainSummary",
    "Drainer",
    "Entry",
    "Lane",
    "Loop",
    "Pass",
    "PassReport",
    "Ran",
    "Services",
    "WebhookOptions",
    "WebhookPass",
    "compose_passes",
    "next_sweep",
    "offer_options",
    "pass_options",
    "run_pass",
    "run_view",
    "within",
]
