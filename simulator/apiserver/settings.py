"""Tunables of the emulator, each with its unit and why the default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class APIServerSettings:
    host: str = "127.0.0.1"
    """Loopback only: the emulator has no authentication."""
    port: int = 0
    """0 picks a free port; read it back from `APIServer.url`."""
    watch_history: int = 2_000
    """Events kept per resource type for watch resumption and consistent pagination; an older
    resourceVersion gets 410. Bounded like the real watch cache, so informers' relist paths run."""
    watch_history_s: float = 180.0
    """Seconds an event stays in that history: a real watch resourceVersion expired after
    3-4 minutes under light load (reference §9)."""
    watcher_backlog: int = 10_000
    """Encoded events one watcher may have queued; a slower watcher's stream is closed."""
    bookmark_interval_s: float = 60.0
    """Seconds between BOOKMARK heartbeats on a long watch (the real watch cache's frequency)."""
    bookmark_before_timeout_s: float = 2.0
    """How long before `timeoutSeconds` ends a watch its one closing BOOKMARK is sent."""
    namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public", "kube-node-lease")
    """Created at start, as a fresh cluster has them."""
    controllers: bool = True
    """Run the emulated kube-controller-manager loops (resourceclaim, node lifecycle, garbage
    collection of objects whose owner never existed); off for tests that need a frozen cluster.
    Owner-deletion cascades and namespace emptying run either way, as before."""
    controller_delay_s: float = 0.05
    """Seconds the emulated controllers wait after a change before reacting to it."""
    node_ready_delay_s: float = 0.2
    """Seconds before a Ready (or condition-less) new Node loses its not-ready taint; the real
    controller takes about 3 s, a short default keeps suites fast while the window exists."""
    orphan_gc_delay_s: float = 0.2
    """Seconds before an object whose owner uid does not exist is collected (real: ~30 s)."""
