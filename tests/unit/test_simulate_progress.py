"""`dra-driver simulate`'s progress line: drawn on a terminal, absent when stderr is piped."""

from __future__ import annotations

import io

from simulator.progress import Steps, progress_display


def shown(force_terminal: bool) -> str:
    stream = io.StringIO()
    with progress_display(stream, force_terminal=force_terminal) as progress:
        steps = Steps(progress)
        steps.count("nodes started", 7, 212)
        progress.refresh()
    return stream.getvalue()


def test_a_terminal_sees_the_counts():
    assert "nodes started 7/212" in shown(force_terminal=True)


def test_a_pipe_gets_no_progress():
    assert "nodes started" not in shown(force_terminal=False)
