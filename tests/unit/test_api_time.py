from __future__ import annotations

from dra_driver.objects.api_time import api_seconds, api_time


def test_api_seconds_reads_times_and_micro_times() -> None:
    assert api_seconds("1970-01-01T00:01:00Z") == 60.0
    assert api_seconds("1970-01-01T00:00:01.500000Z") == 1.5
    assert api_seconds(api_time(10)) is not None


def test_api_seconds_of_no_time_is_none() -> None:
    assert api_seconds("") is None
    assert api_seconds("yesterday") is None
