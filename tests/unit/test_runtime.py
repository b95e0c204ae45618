"""Process runtime helpers."""

from __future__ import annotations

import logging

from dra_driver.runtime import KeyValueFormatter


def test_log_lines_keep_their_context():
    record = logging.makeLogRecord(
        {"msg": "prepare failed", "levelname": "WARNING", "name": "plugin", "claim": "ns/c (u1)"}
    )
    line = KeyValueFormatter("%(levelname)s %(name)s %(message)s").format(record)
    assert line == "WARNING plugin prepare failed claim='ns/c (u1)'"
