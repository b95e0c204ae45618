"""Wait for a Node to lose the not-ready taint, as a test must on a real cluster.

Every new Node is created with `node.kubernetes.io/not-ready:NoSchedule`; the
node-lifecycle controller lifts it once the node is Ready (or reports no
conditions). A scheduler cycle run before that finds no node, so tests that
schedule right after creating nodes wait here first: a watch, bounded in time.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiClient

NOT_READY = "node.kubernetes.io/not-ready"
WAIT_TIMEOUT_S = 30


def not_ready_tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == NOT_READY for t in (node.get("spec") or {}).get("taints") or ())


def wait_schedulable(api: ApiClient, name: str, timeout_s: int = WAIT_TIMEOUT_S) -> dict[str, Any]:
    """The node once it carries no not-ready taint; AssertionError after `timeout_s`."""
    w = watch.Watch()
    for event in w.stream(
        client.CoreV1Api(api).list_node,
        field_selector=f"metadata.name={name}",
        timeout_seconds=timeout_s,
    ):
        node = event["raw_object"]
        if event["type"] != "DELETED" and not not_ready_tainted(node):
            w.stop()
            return node
    raise AssertionError(f"node {name} still has the {NOT_READY} taint after {timeout_s} s")
