"""Third-party logs (lightkube, httpx2) come out of the same structlog renderer, in the same stream."""

from __future__ import annotations

import json
import logging

import pytest

from nodegc.observe.logs import configure_logging, get_logger


def test_library_logs_are_json_lines_with_their_logger_name(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", json_output=True)
    get_logger("nodegc.test").info("ours", k=1)
    logging.getLogger("httpx2").warning("connection reset, retrying")
    logging.getLogger("lightkube.core.generic_client").error("watch failed: %s", "410")
    logging.getLogger("httpx2").info("HTTP Request: GET /api/v1/pods")  # below warning for libraries
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["event"], e["level"]) for e in lines] == [
        ("ours", "info"), ("connection reset, retrying", "warning"), ("watch failed: 410", "error")]
    assert lines[1]["logger"] == "httpx2" and lines[2]["logger"] == "lightkube.core.generic_client"
    assert all("timestamp" in e for e in lines)


def test_debug_lets_library_info_through(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("debug", json_output=True)
    logging.getLogger("httpx2").info("HTTP Request: GET /api/v1/pods")
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["logger"] == "httpx2"
    configure_logging("warning", json_output=True)
    assert len(logging.getLogger().handlers) >= 1
    assert sum(1 for h in logging.getLogger().handlers if h.get_name() == "nodegc") == 1
