"""Bounded waits on controller effects, written so they hold on a real cluster too.

Controllers act "within seconds" after a write, so a test never asserts their
effect at once: it watches until the effect shows, with a time bound. Every
new Node, for one, carries `node.kubernetes.io/not-ready:NoSchedule` until the
node-lifecycle controller lifts it; a scheduler cycle run before finds no node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiClient

NOT_READY = "node.kubernetes.io/not-ready"
WAIT_TIMEOUT_S = 30
Seen = Callable[[str, dict[str, Any]], bool]


def watch_until(
    list_fn: Callable[..., Any],
    seen: Seen,
    *args: Any,
    timeout_s: int = WAIT_TIMEOUT_S,
    **kwargs: Any,
) -> dict[str, Any]:
    """Watch `list_fn` (current state first) until `seen(type, raw object)`; return that object."""
    w = watch.Watch(return_type="object")  # raw objects: no typed model is needed
    for event in w.stream(list_fn, *args, timeout_seconds=timeout_s, **kwargs):
        if seen(event["type"], event["raw_object"]):
            w.stop()
            return event["raw_object"]
    raise AssertionError(f"{getattr(list_fn, '__name__', list_fn)}: not seen in {timeout_s} s")


def not_ready_tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == NOT_READY for t in (node.get("spec") or {}).get("taints") or ())


def wait_schedulable(api: ApiClient, name: str) -> dict[str, Any]:
    """The node once it carries no not-ready taint."""
    return watch_until(
        client.CoreV1Api(api).list_node,
        lambda kind, node: kind != "DELETED" and not not_ready_tainted(node),
        field_selector=f"metadata.name={name}",
    )
