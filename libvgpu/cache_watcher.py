"""Keeps `CacheFiles` in step with the cache root by watching it (inotify via watchfiles).

Scrapes then read only the files already known instead of walking the tree.
The root is scanned once at start, and once more when the watch is first
known to be live (its first batch or idle tick), which closes the gap between
the scan and the watch starting. Each change to the known set bumps
`generation` and wakes `wait_for` callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from watchfiles import Change, awatch

from dra_driver.process.runtime import wait_event
from libvgpu.cache_files import CacheFiles
from libvgpu.cache_paths import CacheFileKey, cache_file_key

log = logging.getLogger(__name__)

_TREE_DEPTH = 3
"""root / area (claims|containers) / owner dir / file."""


@dataclass(frozen=True)
class WatchSettings:
    debounce_ms: int = 1600
    """Longest a burst of changes is grouped before it is applied (watchfiles' default)."""

    step_ms: int = 50
    """Quiet time that ends a batch; also how soon a stop request is noticed."""

    idle_tick_ms: int = 1000
    """A quiet watch still wakes this often; the first wake confirms the watch is live."""

    retry_delay_s: float = 1.0
    """Pause before re-establishing a watch that failed (e.g. the root was removed)."""

    stop_grace_s: float = 5.0
    """How long `aclose` waits for the watch thread before cancelling the task."""


class CacheWatcher:
    def __init__(self, cache_root: str, files: CacheFiles, settings: WatchSettings) -> None:
        self._root = os.path.normpath(cache_root)
        self._files = files
        self._settings = settings
        self._stop = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self.generation = 0

    async def start(self) -> None:
        self._reconcile()
        self._task = asyncio.create_task(self._run(), name="libvgpu-cache-watcher")

    async def aclose(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=self._settings.stop_grace_s)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Return once `predicate()` holds, re-checking after every change to the known set."""
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def wait_for_generation(self, after: int) -> int:
        await self.wait_for(lambda: self.generation > after)
        return self.generation

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self._watch()
            except Exception:
                log.exception("watching %s failed; retrying", self._root)
                await wait_event(self._stop, self._settings.retry_delay_s)

    async def _watch(self) -> None:
        live = False
        async for changes in awatch(
            self._root,
            watch_filter=None,
            debounce=self._settings.debounce_ms,
            step=self._settings.step_ms,
            stop_event=self._stop,
            rust_timeout=self._settings.idle_tick_ms,
            yield_on_timeout=True,
            recursive=True,
        ):
            changed = self._apply(changes)
            if not live:
                live = True
                changed = self._reconcile() or changed
            if changed:
                await self._bump()

    async def _bump(self) -> None:
        async with self._changed:
            self.generation += 1
            self._changed.notify_all()

    def _apply(self, changes: Iterable[tuple[Change, str]]) -> bool:
        changed = False
        for change, path in sorted(changes, key=lambda item: item[1]):
            key = cache_file_key(self._root, path)
            if key is not None:
                changed = self._refresh(path, key) or changed
            elif change is Change.deleted:
                changed = self._files.discard_under(path) or changed
            elif change is Change.added and os.path.isdir(path):
                changed = self._scan(path, _TREE_DEPTH - self._depth(path)) or changed
        return changed

    def _refresh(self, path: str, key: CacheFileKey) -> bool:
        """Follow the file's current state, whatever the event said (batches are unordered)."""
        try:
            is_file = stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            is_file = False
        if is_file:
            return self._files.add(path, key)
        return self._files.discard(path)

    def _depth(self, path: str) -> int:
        return len(os.path.relpath(path, self._root).split(os.sep))

    def _scan(self, directory: str, depth: int) -> bool:
        """Add the cache files found under `directory`, `depth` levels down at most."""
        changed = False
        if depth <= 0:
            return False
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return False
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                changed = self._scan(entry.path, depth - 1) or changed
            elif entry.is_file(follow_symlinks=False):
                key = cache_file_key(self._root, entry.path)
                if key is not None:
                    changed = self._files.add(entry.path, key) or changed
        return changed

    def _reconcile(self) -> bool:
        """Full scan: add what is there, drop what is gone."""
        changed = self._scan(self._root, _TREE_DEPTH)
        for path in self._files.paths():
            if not os.path.isfile(path):
                changed = self._files.discard(path) or changed
        return changed
