"""Tunables of the emulator, each with its unit and why the default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class APIServerSettings:
    host: str = "127.0.0.1"
    """Loopback only: the emulator has no authentication."""
    port: int = 0
    """0 picks a free port; read it back from `APIServer.url`."""
    watch_history: int = 10_000
    """Events kept per resource type for watch resumption; an older resourceVersion gets 410."""
    watcher_backlog: int = 10_000
    """Encoded events one watcher may have queued; a slower watcher's stream is closed."""
    bookmark_interval_s: float = 5.0
    """Seconds between BOOKMARK events on an idle watch that asked for them."""
    namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public", "kube-node-lease")
    """Created at start, as a fresh cluster has them."""
