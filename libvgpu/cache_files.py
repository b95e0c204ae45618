"""The set of known cache files and their mapped readers, shared by watcher and scrapes.

The watcher (event loop) adds and drops paths; scrapes (a worker thread) read
them. One lock covers both, so a reader is never unmapped mid-read. A file
that cannot be opened yet (still being created) stays known and is retried on
the next scrape; only a successful open is kept.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from libvgpu.cache_paths import CacheFileKey
from libvgpu.region_reader import RegionReader, RegionReadError, RegionSnapshot, open_region

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheReading:
    path: str
    key: CacheFileKey
    snapshot: RegionSnapshot


class CacheFiles:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, CacheFileKey] = {}
        self._readers: dict[str, RegionReader] = {}

    def paths(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._keys)

    def add(self, path: str, key: CacheFileKey) -> bool:
        """Know the file; a different file now at a known path is reopened. True if new."""
        with self._lock:
            new = path not in self._keys
            self._keys[path] = key
            reader = self._readers.get(path)
            if reader is not None and _identity(path) != reader.identity:
                self._close(path)
            return new

    def discard(self, path: str) -> bool:
        with self._lock:
            if self._keys.pop(path, None) is None:
                return False
            self._close(path)
            return True

    def discard_under(self, directory: str) -> bool:
        prefix = directory.rstrip("/") + "/"
        with self._lock:
            gone = [path for path in self._keys if path.startswith(prefix)]
            for path in gone:
                del self._keys[path]
                self._close(path)
            return bool(gone)

    def read_all(self) -> list[CacheReading]:
        """Snapshots of every known file that reads cleanly right now."""
        readings = []
        with self._lock:
            for path, key in self._keys.items():
                try:
                    reader = self._readers.get(path)
                    if reader is None:
                        reader = self._readers[path] = open_region(path)
                    readings.append(CacheReading(path, key, reader.read()))
                except RegionReadError as error:
                    log.debug("skipping %s: %s", path, error)
        return readings

    def close(self) -> None:
        with self._lock:
            for path in list(self._readers):
                self._close(path)
            self._keys.clear()

    def _close(self, path: str) -> None:
        reader = self._readers.pop(path, None)
        if reader is not None:
            reader.close()


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_dev, info.st_ino
