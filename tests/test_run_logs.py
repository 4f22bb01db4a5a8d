"""What Prefect logs around a flow run reaches the run's log and the terminal: its own races stay out of both."""

from __future__ import annotations

import logging

import pytest
from prefect.events import utilities
from prefect.events.clients import AssertingEventsClient
from prefect.events.worker import EventsWorker
from prefect.settings import PREFECT_API_URL, temporary_settings

import flows.pipeline_flows  # noqa: F401  (installs the run logs' filters, as a deployment's process does)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def stopped_events_worker(monkeypatch):
    """Prefect's events worker after the engine stopped it, as a flow run that fails at once leaves it while its
    heartbeat thread still beats (Prefect's `_send_heartbeats`)."""
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):  # nothing listens: no event is sent
        worker = EventsWorker.instance(AssertingEventsClient)
        worker.drain()
        monkeypatch.setattr(EventsWorker, "instance", classmethod(lambda cls, *args: worker))
        yield worker


def test_a_heartbeat_after_the_run_stopped_its_events_is_not_an_error_and_other_lost_events_still_are(
    stopped_events_worker,
):
    records = Records()
    logger = logging.getLogger("prefect.events.utilities")
    logger.addHandler(records)
    try:
        for event in ("prefect.flow-run.heartbeat", "prefect.flow-run.Completed"):
            utilities.emit_event(event, resource={"prefect.resource.id": "prefect.flow-run.1"})
    finally:
        logger.removeHandler(records)
    assert [r.getMessage() for r in records.records] == ["Error emitting event: prefect.flow-run.Completed"]
    assert "stopped service instance" in str(records.records[0].exc_info[1])
