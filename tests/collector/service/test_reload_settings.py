"""A reload keeps the settings only a restart changes, the fleet's among them, and never logs a password."""

from __future__ import annotations

import logging

import msgspec
import pytest

from gz_ia.collector.config import CollectorConfig, FleetConfig
from gz_ia.collector.service.reload import keep_restart_settings


def test_a_reload_keeps_the_running_fleet_and_names_it_without_its_url(caplog: pytest.LogCaptureFixture) -> None:
    running = CollectorConfig(fleet=FleetConfig(url="nats://laptop:old-secret@127.0.0.1:4222"))
    changed = msgspec.structs.replace(
        running, log_level="debug", fleet=FleetConfig(url="nats://laptop:new-secret@127.0.0.1:4222")
    )
    with caplog.at_level(logging.WARNING, logger="gz_ia.collector"):
        applied = keep_restart_settings(running, changed)
    assert applied.fleet == running.fleet and applied.log_level == "debug"
    assert "fleet changed to [fleet]; it takes effect at the next restart" in caplog.text
    assert "secret" not in caplog.text
