"""What DRA claims hold on the legacy scheduler's GPUs, in a mixed cluster.

The extender's engine counts legacy pods; on a node that also runs the kubelet
DRA plugin, the DRA controller hands out shares of the same GPUs through
ResourceClaims. This view watches the driver's ResourceSlices (which device
name of which pool is which GPU uuid on which node) and every ResourceClaim,
and charges each allocation result to (node, uuid), the key the register
annotation's devices have in the engine (controller/mixed_usage.py). The state
calls back with the nodes whose DRA usage changed, so only those are reset in
the engine.

A pod refused for room on a node where claims hold GPUs is told which
(`holders`): the refusal names the other mode's holders, as the node side's
does.

For the preempt verb, `shares` gives each allocated claim's share on the
asked nodes with the pods that must all go before it frees: every
`status.reservedFor` entry, a consumer that is no pod (or has no uid)
included, which no pod deletion removes.

At Bind, under the node lock, `problems` re-reads the claims from the API:
the informer may not yet show an allocation the controller wrote a moment
ago, and the lock orders the two writers, so what the API shows then is all
the extender must fit beside.

`NoDraUsage` stands in outside mixed mode: nothing held, nothing re-read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from controller.inventory import Inventory, build_inventory, charge_claims, claim_usage
from controller.mixed_usage import (
    NodeUsage,
    add_usage,
    claims_usage,
    holders_text,
    over_commits,
)
from controller.object_state import reservations_of
from controller.preemption_shares import Share, claim_shares
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.kube.informer import Informer, InformerSettings, object_key
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.claim_workloads import DRIVER_NAME
from dra_driver.objects.resource_api import RESOURCE_API

CLAIMS = f"{RESOURCE_API}/resourceclaims"
SLICES = f"{RESOURCE_API}/resourceslices"


class DraHolds(Protocol):
    informers: tuple[Informer, ...]

    def node_usage(self, node: str) -> Mapping[str, DeviceUsage]: ...

    def charge_quota(self, ledger: QuotaLedger, vendors: VendorRegistry) -> None:
        """Charge what each namespace's claims hold to its quota of their devices' vendor."""

    def holders(self, nodes: Collection[str]) -> dict[str, str]:
        """Per node of `nodes` where allocated claims hold GPUs, what a refusal says of them."""

    def shares(self, nodes: Collection[str], vendors: VendorRegistry) -> dict[str, list[Share]]:
        """Per node of `nodes`, each allocated claim's share there and who reserves it."""

    async def problems(self, node: Node, legacy: Mapping[str, DeviceUsage]) -> list[str]: ...


def claim_holders(
    claims: Iterable[dict[str, Any]], inventory: Inventory, nodes: Collection[str]
) -> dict[str, str]:
    """Per node of `nodes`, the claims holding its GPUs and what each holds there:
    `DRA claims on GPU-a: ns/x (12288 MiB, 30 cores), ns/y (...); on GPU-b: ...`."""
    held: dict[str, dict[str, dict[str, DeviceUsage]]] = {}
    for claim in claims:
        for device, amount in claim_usage(claim, inventory):
            if device.node not in nodes:
                continue
            on_gpu = held.setdefault(device.node, {}).setdefault(device.uuid, {})
            key = object_key(claim)
            on_gpu[key] = on_gpu.get(key, DeviceUsage()).plus(amount)
    return holders_text("DRA claims", held)


def reserved_shares(
    claims: Iterable[Mapping[str, Any]],
    inventory: Inventory,
    vendors: VendorRegistry,
    nodes: Collection[str],
) -> dict[str, list[Share]]:
    """Per node of `nodes`, each allocated claim's share there, held by every
    `reservedFor` entry: a pod by its uid, any other consumer by a key no pod has."""
    shares: dict[str, list[Share]] = {}
    for claim in claims:
        holders = frozenset(_reserver(entry) for entry in reservations_of(claim))
        for share in claim_shares([claim], inventory, vendors):
            if share.node in nodes:
                shares.setdefault(share.node, []).append(replace(share, holders=holders))
    return shares


def _reserver(entry: Mapping[str, Any]) -> str:
    """A pod's uid; for another consumer (or an entry without a uid) a key that is never
    a pod's uid, so the share it holds never frees by pod deletions."""
    uid = entry.get("uid")
    if entry.get("resource") == "pods" and uid:
        return str(uid)
    return f"{entry.get('apiGroup') or ''}/{entry.get('resource')}/{entry.get('name')}/{uid}"


class NoDraUsage:
    """Outside mixed mode the extender is the only allocator of its GPUs."""

    informers: tuple[Informer, ...] = ()

    def node_usage(self, node: str) -> Mapping[str, DeviceUsage]:
        return {}

    def charge_quota(self, ledger: QuotaLedger, vendors: VendorRegistry) -> None:
        return None

    def holders(self, nodes: Collection[str]) -> dict[str, str]:
        return {}

    def shares(self, nodes: Collection[str], vendors: VendorRegistry) -> dict[str, list[Share]]:
        return {}

    async def problems(self, node: Node, legacy: Mapping[str, DeviceUsage]) -> list[str]:
        return []


class DraUsage:
    """Slices and claims informers, and the per-node usage of the claims' allocations."""

    def __init__(
        self,
        client: KubeClient,
        on_change: Callable[[set[str]], None],
        *,
        driver: str = DRIVER_NAME,
        settings: InformerSettings | None = None,
    ) -> None:
        self.client = client
        self.driver = driver
        self.on_change = on_change
        self.slices = Informer(
            client,
            SLICES,
            handlers=[self._on_slice],
            field_selector=f"spec.driver={driver}",
            settings=settings,
        )
        self.claims = Informer(client, CLAIMS, handlers=[self._on_claim], settings=settings)
        self.informers = (self.slices, self.claims)
        self.inventory = Inventory()
        self.usage: NodeUsage = {}

    def node_usage(self, node: str) -> Mapping[str, DeviceUsage]:
        return self.usage.get(node, {})

    def charge_quota(self, ledger: QuotaLedger, vendors: VendorRegistry) -> None:
        charge_claims(ledger, self.claims.store.values(), self.inventory, vendors)

    def holders(self, nodes: Collection[str]) -> dict[str, str]:
        return claim_holders(self.claims.store.values(), self.inventory, nodes)

    def shares(self, nodes: Collection[str], vendors: VendorRegistry) -> dict[str, list[Share]]:
        return reserved_shares(self.claims.store.values(), self.inventory, vendors, nodes)

    async def problems(self, node: Node, legacy: Mapping[str, DeviceUsage]) -> list[str]:
        """Why `legacy` (every legacy share on the node, the binding pod's included) does
        not fit beside the claims allocated on the node now; empty when it fits."""
        listed = await self.client.list(CLAIMS)
        held = claims_usage(listed.get("items") or [], self.inventory).get(node.name, {})
        total = add_usage({node.name: dict(legacy)}, {node.name: held})
        return over_commits(node, total.get(node.name, {}))

    def _on_slice(self, kind: str, obj: dict[str, Any]) -> None:
        self.inventory = build_inventory(self.slices.store.values(), self.driver)
        self._recount()

    def _on_claim(self, kind: str, obj: dict[str, Any]) -> None:
        """Any change may add or clear an allocation; the sum is taken again (claims are
        few next to pods, and only the nodes whose sum moved are reset in the engine)."""
        self._recount()

    def _recount(self) -> None:
        usage = claims_usage(self.claims.store.values(), self.inventory)
        changed = {
            node
            for node in usage.keys() | self.usage.keys()
            if usage.get(node) != self.usage.get(node)
        }
        self.usage = usage
        if changed:
            self.on_change(changed)
