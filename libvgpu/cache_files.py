"""The set of known cache files, shared by the watcher (event loop) and scrapes (a worker thread).

The watcher adds and drops paths; a scrape reads every known file afresh (see
`region_reader`: nothing stays open or mapped between scrapes, so a file that
is replaced, truncated or deleted meanwhile costs at most its own series).
A file that cannot be read stays known and is read again on the next scrape.
A file whose bytes are the same as at the last scrape is not decoded again:
the snapshot decoded then is reused (an idle container costs one copy).

Trouble is logged once per change, not once per scrape: the first time a file
fails, and again only when its reason changes or after it read cleanly. A
damaged or unreadable file is a WARNING; one still being created is INFO.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from libvgpu.cache_paths import CacheFileKey
from libvgpu.region_reader import (
    RegionBytes,
    RegionNotReadyError,
    RegionReadError,
    RegionSnapshot,
    decode_region,
    read_region_bytes,
)

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
        self._problems: dict[str, str] = {}
        """Path -> the reason last logged for it; absent while the file reads cleanly."""
        self._decoded: dict[str, tuple[RegionBytes, RegionSnapshot]] = {}
        """Path -> its bytes at the last clean read and the snapshot decoded from them."""

    def paths(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._keys)

    def add(self, path: str, key: CacheFileKey) -> bool:
        """Know the file (again); True if it was not known."""
        with self._lock:
            new = path not in self._keys
            self._keys[path] = key
            return new

    def discard(self, path: str) -> bool:
        with self._lock:
            self._forget(path)
            return self._keys.pop(path, None) is not None

    def discard_under(self, directory: str) -> bool:
        prefix = directory.rstrip("/") + "/"
        with self._lock:
            gone = [path for path in self._keys if path.startswith(prefix)]
            for path in gone:
                del self._keys[path]
                self._forget(path)
            return bool(gone)

    def read_all(self) -> list[CacheReading]:
        """Snapshots of every known file that reads cleanly right now; never raises for a file."""
        with self._lock:
            known = list(self._keys.items())
        readings = []
        for path, key in known:
            try:
                snapshot = self._read(path)
            except RegionReadError as error:
                level = logging.INFO if isinstance(error, RegionNotReadyError) else logging.WARNING
                self._report(path, error.reason, level)
            except Exception as error:  # a bug for one file must not fail the whole scrape
                self._report(path, f"{type(error).__name__}: {error}", logging.WARNING)
            else:
                self._cleared(path)
                readings.append(CacheReading(path, key, snapshot))
        return readings

    def _read(self, path: str) -> RegionSnapshot:
        raw = read_region_bytes(path)
        previous = self._decoded.get(path)
        if previous is not None and previous[0] == raw:
            return previous[1]
        snapshot = decode_region(raw)
        with self._lock:
            if path in self._keys:
                self._decoded[path] = (raw, snapshot)
        return snapshot

    def _forget(self, path: str) -> None:
        self._problems.pop(path, None)
        self._decoded.pop(path, None)

    def _report(self, path: str, reason: str, level: int) -> None:
        with self._lock:
            if path not in self._keys or self._problems.get(path) == reason:
                return
            self._problems[path] = reason
        log.log(level, "cache file skipped", extra={"path": path, "reason": reason})

    def _cleared(self, path: str) -> None:
        with self._lock:
            reason = self._problems.pop(path, None)
        if reason is not None:
            log.info("cache file readable again", extra={"path": path, "was": reason})

    def close(self) -> None:
        with self._lock:
            self._keys.clear()
            self._problems.clear()
            self._decoded.clear()
