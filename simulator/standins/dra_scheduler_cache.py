"""The kube-scheduler stand-in's cache: what its watches delivered, plus its own assumptions.

Like kube-scheduler's informers and scheduler cache, it holds the nodes (as
node_fit.NodeInfo, with the requests of the pods bound or assumed there), the pods,
the ResourceClaims, the DeviceClasses (the resource names they answer to), and, for the
scheduler-allocated mode, the ResourceSlices. A pod the scheduler placed counts on its
node from that moment ("assumed"), before its binding is written, so the next cycle
does not hand the same room out again; an allocation it decided counts the same way
until the watch shows it. It tells its owner, through callbacks, which pending pods
to (re)consider: a new or changed pending pod, the pods using a claim that changed,
every parked pod when a node, slice or class changed in a way that matters to Filter.

It does no I/O: watch_reflector.Reflector feeds `apply` (or `fill` with listed
objects for a one-off cycle), and it is only touched from the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from dra_driver.objects.node_predicates import pod_resource_requests
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.pod_scheduling import scheduling_gate_names
from simulator.standins.node_fit import NodeInfo

PodWake = Callable[[str], None]
"""Called with a pod key that is worth a scheduling attempt now."""

TERMINAL_PHASES = ("Succeeded", "Failed")


def key_of(obj: Mapping[str, Any]) -> str:
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])


def _filter_view(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a node Filter reads: a heartbeat that changes none of it wakes no pod."""
    metadata = node.get("metadata") or {}
    return (
        metadata.get("labels"),
        node.get("spec"),
        (node.get("status") or {}).get("allocatable"),
    )


class SchedulerCache:
    """Nodes, pods, claims (and slices, classes) by key; see the module docstring."""

    def __init__(self, scheduler_name: str, wake: PodWake | None = None) -> None:
        self.scheduler_name = scheduler_name
        self.wake: PodWake = wake or (lambda key: None)
        """Told the keys of pending pods worth an attempt now."""
        self.nodes: dict[str, NodeInfo] = {}
        self._node_order: list[NodeInfo] | None = None
        self.pods: dict[str, dict[str, Any]] = {}
        self._pod_node: dict[str, str] = {}
        """pod key -> the node its requests count on (bound or assumed)."""
        self.claims: dict[str, dict[str, Any]] = {}
        self._claim_users: dict[str, set[str]] = {}
        """claim key -> keys of the pods that name it."""
        self._assumed_claims: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self._slices_by_node: dict[str, dict[str, dict[str, Any]]] = {}
        """nodeName ("" for slices of all or selected nodes) -> that node's slices."""
        self.classes: dict[str, dict[str, Any]] = {}
        self.parked: set[str] = set()
        """Pending pods that failed and wait for an event (or their backoff)."""

    # ---- reads --------------------------------------------------------------

    def node_infos(self) -> list[NodeInfo]:
        """Every node, by name (kube-scheduler's order is its own; this one is stable)."""
        if self._node_order is None:
            self._node_order = [self.nodes[name] for name in sorted(self.nodes)]
        return self._node_order

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        key = f"{namespace}/{name}"
        return self._assumed_claims.get(key) or self.claims.get(key)

    def every_claim(self) -> Iterator[dict[str, Any]]:
        """All claims, an allocation decided here standing in for the cached version."""
        for key, claim in self.claims.items():
            yield self._assumed_claims.get(key, claim)
        for key, claim in self._assumed_claims.items():
            if key not in self.claims:
                yield claim

    def pending(self, pod: Mapping[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and spec.get("schedulerName") == self.scheduler_name
            and not pod["metadata"].get("deletionTimestamp")
        )

    def assumed(self, key: str) -> bool:
        """Placed by this scheduler and not yet shown bound: its binding is written or
        being written, so it is not scheduled again (kube-scheduler's skipPodSchedule)."""
        pod = self.pods.get(key)
        return key in self._pod_node and pod is not None and self.pending(pod)

    def pending_keys(self) -> list[str]:
        return [key for key, pod in self.pods.items() if self.pending(pod)]

    # ---- assumptions --------------------------------------------------------

    def assume(self, key: str, node_name: str, claims: Iterable[dict[str, Any]] = ()) -> None:
        """The pod counts on the node, and these claims (with the allocation decided here)
        stand in for the cached ones, until the watch shows the writes or `forget`."""
        pod = self.pods[key]
        self._place(key, node_name, pod_resource_requests(pod))
        for claim in claims:
            self._assumed_claims[key_of(claim)] = claim

    def forget(self, key: str, claims: Iterable[dict[str, Any]] = ()) -> None:
        """The binding failed: the assumption goes, unless the watch shows the pod bound."""
        pod = self.pods.get(key)
        if pod is None or not (pod.get("spec") or {}).get("nodeName"):
            self._unplace(key)
        for claim in claims:
            self._assumed_claims.pop(key_of(claim), None)

    # ---- feeding ------------------------------------------------------------

    def fill(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        """Objects listed for a one-off cycle (no callbacks run)."""
        wake, self.wake = self.wake, lambda key: None
        try:
            self.apply(kind, "LIST", list(items))
        finally:
            self.wake = wake

    def apply(self, resource: str, kind: str, obj: Any) -> None:
        """One watch event (or a LIST of items) of `resource`: nodes, pods, claims,
        slices or classes."""
        handler = getattr(self, f"_on_{resource}")
        if kind != "LIST":
            handler(kind, obj)
            return
        store = self._store(resource)
        listed = {key_of(item): item for item in obj}
        for key in [k for k in store if k not in listed]:
            handler("DELETED", store[key])
        for key, item in listed.items():
            handler("MODIFIED" if key in store else "ADDED", item)

    def _store(self, resource: str) -> Mapping[str, Any]:
        stores: dict[str, Mapping[str, Any]] = {
            "nodes": self.nodes,
            "pods": self.pods,
            "claims": self.claims,
            "slices": self.slices,
            "classes": self.classes,
        }
        return stores[resource]

    def _wake_parked(self) -> None:
        for key in list(self.parked):
            self.wake(key)

    def _on_nodes(self, kind: str, node: dict[str, Any]) -> None:
        name = key_of(node)
        old = self.nodes.get(name)
        if kind == "DELETED":
            self.nodes.pop(name, None)
            self._node_order = None
            return
        self.nodes[name] = NodeInfo.of(node) if old is None else old.updated(node)
        self._node_order = None
        if old is None:
            for pod_key, on in self._pod_node.items():
                if on == name:
                    self.nodes[name].add(pod_key, pod_resource_requests(self.pods[pod_key]))
        if old is None or _filter_view(old.node) != _filter_view(node):
            self._wake_parked()

    def _on_pods(self, kind: str, pod: dict[str, Any]) -> None:
        key = key_of(pod)
        old = self.pods.get(key)
        if old is not None:
            for claim_key in self._claim_keys(old):
                self._claim_users.get(claim_key, set()).discard(key)
        if kind == "DELETED":
            self.pods.pop(key, None)
            self._unplace(key)
            self.parked.discard(key)
            return
        self.pods[key] = pod
        for claim_key in self._claim_keys(pod):
            self._claim_users.setdefault(claim_key, set()).add(key)
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if spec.get("nodeName") and phase not in TERMINAL_PHASES:
            self._place(key, spec["nodeName"], pod_resource_requests(pod))
        elif spec.get("nodeName"):
            self._unplace(key)
        if not self.pending(pod) or scheduling_gate_names(pod):
            self.parked.discard(key)
            return
        if old is None or key not in self.parked or self._claims_changed(old, pod):
            self.wake(key)

    def _on_claims(self, kind: str, claim: dict[str, Any]) -> None:
        key = key_of(claim)
        if kind == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = claim
        assumed = self._assumed_claims.get(key)
        if assumed is not None and (
            kind == "DELETED" or (claim.get("status") or {}).get("allocation") is not None
        ):
            del self._assumed_claims[key]
        for pod_key in list(self._claim_users.get(key, ())):
            if pod_key in self.parked:
                self.wake(pod_key)

    def _on_slices(self, kind: str, item: dict[str, Any]) -> None:
        key = key_of(item)
        old = self.slices.pop(key, None)
        if old is not None:
            self._slices_by_node.get(_slice_node(old), {}).pop(key, None)
        if kind != "DELETED":
            self.slices[key] = item
            self._slices_by_node.setdefault(_slice_node(item), {})[key] = item
        self._wake_parked()

    def _on_classes(self, kind: str, item: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.classes.pop(key_of(item), None)
        else:
            self.classes[key_of(item)] = item
        self._wake_parked()

    def slices_for(self, node: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The slices that may publish devices for the node (dra_allocator checks which)."""
        own = self._slices_by_node.get(node["metadata"]["name"], {})
        return [*own.values(), *self._slices_by_node.get("", {}).values()]

    @staticmethod
    def _claim_keys(pod: Mapping[str, Any]) -> list[str]:
        namespace = pod["metadata"].get("namespace")
        return [f"{namespace}/{name}" for name in pod_claim_names(pod).values() if name]

    @staticmethod
    def _claims_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return pod_claim_names(old) != pod_claim_names(new) or old.get("spec") != new.get("spec")

    def _place(self, key: str, node_name: str, requests: Mapping[str, Any]) -> None:
        previous = self._pod_node.get(key)
        if previous is not None and previous != node_name and previous in self.nodes:
            self.nodes[previous].remove(key)
        self._pod_node[key] = node_name
        info = self.nodes.get(node_name)
        if info is not None:
            info.add(key, requests)

    def _unplace(self, key: str) -> None:
        node_name = self._pod_node.pop(key, None)
        if node_name is not None and node_name in self.nodes:
            self.nodes[node_name].remove(key)


def _slice_node(item: Mapping[str, Any]) -> str:
    return str((item.get("spec") or {}).get("nodeName") or "")
