"""The regression alert: a Prefect Automation that turns every ``odyssey.champion.regressed`` event
(emitted by ``nightly-eval`` when a champion falls below its recorded score) into one message
through a webhook notification block. Apply it once per Prefect server, after ``prefect deploy``:

    python -m flows.automations --webhook-url https://hooks.slack.com/services/...

Both the block (``custom-webhook/odyssey-alerts``) and the Automation
(``odyssey-champion-regressed``) are created or updated in place, so a second run changes
nothing but what was asked. The webhook receives JSON ``{"text": ..., "subject": ...}`` (Slack's
and most chat webhooks' format); ``--json-data`` lays another body template over it."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from flows.nightly import REGRESSION_EVENT

AUTOMATION_NAME = "odyssey-champion-regressed"
BLOCK_NAME = "odyssey-alerts"
WEBHOOK_ENV = "ODYSSEY_ALERT_WEBHOOK_URL"
# {{subject}} and {{body}} are the block's own placeholders, filled from the rendered action
DEFAULT_JSON_DATA: dict[str, Any] = {"text": "{{subject}}\n{{body}}", "subject": "{{subject}}"}
# Jinja, rendered by the server with the triggering event
SUBJECT = "Odyssey: champion {{ event.payload.model_name }} regressed"
BODY = (
    "{{ event.payload.model_name }} v{{ event.payload.champion }} regressed in the nightly "
    "evaluation: champion's recorded {{ event.payload.metric or 'score' }} "
    "{{ event.payload.recorded }}, today's {{ event.payload.current }} "
    "(allowed drop {{ event.payload.margin }})."
)


def ensure_webhook_block(
    url: str, *, json_data: Mapping[str, Any] | None = None, name: str = BLOCK_NAME
) -> Any:
    """Save (or overwrite) the ``custom-webhook`` notification block; returns its document id."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    block = CustomWebhookNotificationBlock(
        name=name, url=url, method="POST", json_data=dict(json_data or DEFAULT_JSON_DATA)
    )
    return block.save(name, overwrite=True)


def regression_automation(block_document_id: Any) -> Any:
    """The Automation: each regression event (any model) -> one notification."""
    from prefect.automations import Automation
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import EventTrigger, Posture

    return Automation(
        name=AUTOMATION_NAME,
        description="nightly-eval found a champion below its recorded score: tell someone.",
        trigger=EventTrigger(
            match={"prefect.resource.id": "odyssey.model.*"},
            expect={REGRESSION_EVENT},
            posture=Posture.Reactive,
            threshold=1,
            within=0,
        ),
        actions=[SendNotification(block_document_id=block_document_id, subject=SUBJECT, body=BODY)],
    )


def apply(url: str, *, json_data: Mapping[str, Any] | None = None) -> Any:
    """Create or update the block and the Automation on the configured Prefect API."""
    from prefect.automations import Automation

    block_id = ensure_webhook_block(url, json_data=json_data)
    wanted = regression_automation(block_id)
    try:
        existing = Automation.read(name=AUTOMATION_NAME)
    except ValueError:  # "Automation not found"
        existing = None
    if existing is None:
        return wanted.create()
    existing.description = wanted.description
    existing.trigger = wanted.trigger
    existing.actions = wanted.actions
    existing.enabled = True
    existing.update()
    return existing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.automations", description=__doc__)
    parser.add_argument(
        "--webhook-url",
        default=os.environ.get(WEBHOOK_ENV),
        help=f"where the alert is POSTed (default: ${WEBHOOK_ENV})",
    )
    parser.add_argument(
        "--json-data", help="the JSON body template (placeholders {{subject}}, {{body}})"
    )
    args = parser.parse_args(argv)
    if not args.webhook_url:
        parser.error(f"give --webhook-url or set {WEBHOOK_ENV}")
    automation = apply(
        args.webhook_url, json_data=json.loads(args.json_data) if args.json_data else None
    )
    print(f"automation {automation.name} ({automation.id}) -> custom-webhook/{BLOCK_NAME}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
