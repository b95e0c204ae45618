"""The simulation's one line of progress on stderr: what it does now, with n/N counts.

stdout holds the report (`-o json` stays machine-readable), so progress goes to
stderr, and is drawn only when stderr is a terminal: piped into a log, nothing.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


def progress_display(stream: TextIO, *, force_terminal: bool | None = None) -> Progress:
    """A transient spinner, the current step and the time elapsed, on `stream`;
    `force_terminal` overrides rich's check of whether `stream` is a terminal."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(file=stream, force_terminal=force_terminal),
        transient=True,
    )


class Steps:
    """`steps(text)` shows what the simulation does now (`nodes started 12/212`)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=None)

    def __call__(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def count(self, what: str, done: int, total: int) -> None:
        self(f"{what} {done}/{total}")
