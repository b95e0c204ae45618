"""Watching host files by looking at them, for when inotify is not there to ask.

A user has 128 inotify instances on a default host (fs.inotify.max_user_instances)
and a kubelet plugin takes two; `dra-driver simulate` runs one plugin per emulated
node in one process, and a busy node may have spent its instances on other agents.
Polling costs a few `stat` calls per interval and sees a change within one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path

Signature = tuple[int, int, int] | None
"""(inode, mtime ns, size) of a file, None when it is absent."""


def file_signature(path: Path) -> Signature:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


async def poll_files(
    paths: Sequence[Path], on_change: Callable[[], None], interval_s: float
) -> None:
    """Call `on_change` whenever one of `paths` appears, vanishes, or is rewritten or
    replaced (a ConfigMap volume swaps a symlink: a new inode); runs until cancelled."""
    seen = [file_signature(path) for path in paths]
    while True:
        await asyncio.sleep(interval_s)
        now = [file_signature(path) for path in paths]
        if now != seen:
            seen = now
            on_change()
