"""The controller's view of the devices: ResourceSlices -> the engine's nodes,
allocated claims -> the engine's usage. Pure: plain dicts in, dataclasses out.

Only the newest generation of a complete pool counts (what kube-scheduler
does). A device's identity is (driver, pool, device name): usage written by
anyone (kube-scheduler, an older controller) is charged to the card its
result names, and a result naming a device the inventory no longer has is
ignored. The engine knows a device by its `uuid` attribute on its node
(HAMi's uuid filters match it), so a uuid is only ever resolved together
with the node. A uuid on devices of several nodes (cloned mock files or VMs,
a bad NVML answer) keeps one card per node; a uuid twice on one node is one
card, counted once, with every share on either device charged to it. Both
are listed in `duplicate_uuids` for the caller to report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from api.quantity import MIB, QuantityError, parse_quantity, to_mib_ceil
from controller.partition_inventory import (
    CounterSetKey,
    PartitionDevice,
    claim_partitions,
    counter_sets,
    is_partition,
    partition_device,
)
from controller.partition_quota import partition_amount
from dra_driver.engine.model import Device, DeviceUsage, Node, first_of_each_id, repeated_ids
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.objects.quotas import quota_limits

DeviceKey = tuple[str, str, str]
"""(driver, pool, device name): how allocation results name a device."""

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """One device of a usable pool, with what the engine and CEL need to know."""

    driver: str
    pool: str
    node: str
    spec: Mapping[str, Any]
    slice_uid: str
    slice_generation: int
    uuid: str
    cache_key: tuple[str, int, str] = field(init=False, repr=False, compare=False)
    """Names this version of the device for the CEL result cache. Built once with the
    device, so that the cache's entries share it instead of each holding a tuple made
    by the decision that filled it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache_key", (self.slice_uid, self.slice_generation, self.name))

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)

    def attribute(self, name: str) -> Any:
        """An attribute's value by its short or fully qualified name, or None."""
        attributes = self.spec.get("attributes") or {}
        short = name.removeprefix(f"{self.driver}/")
        entry = attributes.get(short) or attributes.get(f"{self.driver}/{short}")
        if not entry:
            return None
        return next(iter(entry.values()))

    def capacity(self) -> dict[str, Mapping[str, Any]]:
        """Capacities by short name."""
        return {
            name.removeprefix(f"{self.driver}/"): entry
            for name, entry in (self.spec.get("capacity") or {}).items()
        }


@dataclass(slots=True)
class Inventory:
    """Nodes for the engine and the published device behind every engine device."""

    nodes: dict[str, Node] = field(default_factory=dict)
    by_key: dict[DeviceKey, PublishedDevice] = field(default_factory=dict)
    """Every published device of a usable pool, by how allocation results name it."""
    by_node_uuid: dict[tuple[str, str], PublishedDevice] = field(default_factory=dict)
    """(node, uuid) -> the device behind that engine device."""
    duplicate_uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """uuid -> the node of every device carrying it, for uuids on more than one device."""
    partitions: dict[DeviceKey, PartitionDevice] = field(default_factory=dict)
    """MIG partition devices (controller/partition_inventory.py): never in the engine."""
    partition_devices: dict[DeviceKey, PublishedDevice] = field(default_factory=dict)
    """The published device behind each partition (selectors, allocation results)."""
    counter_sets: dict[CounterSetKey, dict[str, int]] = field(default_factory=dict)
    """Each card's counter set, by pool and name."""
    partition_cards: dict[str, dict[CounterSetKey, list[PartitionDevice]]] = field(
        default_factory=dict
    )
    """node -> card (counter set) -> its partitions, in published order."""

    def device(self, node: str, uuid: str) -> PublishedDevice:
        """The published device behind the engine's device `uuid` on `node`."""
        return self.by_node_uuid[(node, uuid)]

    def published(self) -> Iterator[PublishedDevice]:
        """Every published device of a usable pool, shares and partitions."""
        yield from self.by_key.values()
        yield from self.partition_devices.values()

    def uuids(self) -> frozenset[str]:
        """Every engine device id (a uuid filter allowing these allows everything)."""
        return frozenset(uuid for _, uuid in self.by_node_uuid)

    def uuids_where(self, predicate: Callable[[PublishedDevice], bool]) -> frozenset[str]:
        """The uuids whose every engine device satisfies `predicate`.

        A uuid filter cannot tell two nodes' devices with one uuid apart, so a
        uuid is allowed only when all of them qualify (never a device that does not).
        """
        refused = set()
        chosen = set()
        for (_, uuid), device in self.by_node_uuid.items():
            (chosen if predicate(device) else refused).add(uuid)
        return frozenset(chosen - refused)

    def uuid_groups(self, attribute: str) -> dict[str, frozenset[str]]:
        """repr(attribute value) -> uuids of the devices with that value; a uuid whose
        devices disagree (or lack the attribute on some) is in no group."""
        values: dict[str, set[str]] = {}
        for (_, uuid), device in self.by_node_uuid.items():
            value = device.attribute(attribute)
            values.setdefault(uuid, set()).add("" if value is None else repr(value))
        groups: dict[str, set[str]] = {}
        for uuid, found in values.items():
            if len(found) == 1 and (value := next(iter(found))):
                groups.setdefault(value, set()).add(uuid)
        return {value: frozenset(uuids) for value, uuids in groups.items()}


@lru_cache(maxsize=4096)
def _mib_ceil(value: Decimal) -> int:
    return to_mib_ceil(value)


def capacity_value(entry: Mapping[str, Any]) -> Decimal:
    return parse_quantity(str(entry["value"]))


def engine_device(device: PublishedDevice, ignored_taints: frozenset[str]) -> Device:
    """HAMi's DeviceInfo from the published device: memory in MiB, cores, split count.

    A NoSchedule/NoExecute taint (other than the controller's own allocation
    taint) makes the card unhealthy for the engine, as an unhealthy GPU is.
    """
    capacity = device.capacity()
    memory = capacity.get("memory")
    cores = capacity.get("cores")
    shares = capacity.get("shares")
    tainted = any(
        taint.get("effect") in SCHEDULING_EFFECTS and taint.get("key") not in ignored_taints
        for taint in device.spec.get("taints") or []
    )
    numa = device.attribute("numa")
    index = device.attribute("index")
    return Device(
        id=device.uuid,
        index=int(index) if isinstance(index, int) else 0,
        type=str(device.attribute("type") or device.attribute("productName") or ""),
        count=int(capacity_value(shares)) if shares else 1,
        memory_mib=int(capacity_value(memory)) // MIB if memory else 0,
        cores=int(capacity_value(cores)) if cores else 100,
        numa=int(numa) if isinstance(numa, int) else 0,
        healthy=not tainted,
    )


def build_inventory(
    slices: Iterable[Mapping[str, Any]],
    driver: str,
    ignored_taints: frozenset[str] = frozenset(),
) -> Inventory:
    """The usable devices of `driver`, per node (node-local slices only); partition
    devices and counter sets go to their own tables, not to the engine's nodes."""
    pools: dict[str, list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != driver or not spec.get("nodeName"):
            continue
        pools.setdefault(spec["pool"]["name"], []).append(item)
    inventory = Inventory()
    per_node: dict[str, list[tuple[Device, PublishedDevice]]] = {}
    for pool, items in sorted(pools.items()):
        newest = max(int(i["spec"]["pool"]["generation"]) for i in items)
        current = [i for i in items if int(i["spec"]["pool"]["generation"]) == newest]
        if len(current) != int(current[0]["spec"]["pool"].get("resourceSliceCount", 1)):
            continue
        node_name = current[0]["spec"]["nodeName"]
        found = per_node.setdefault(node_name, [])
        for item in current:
            slice_uid = str(item["metadata"].get("uid", ""))
            inventory.counter_sets.update(counter_sets(pool, item["spec"]))
            for spec in item["spec"].get("devices") or []:
                published = _published(driver, pool, node_name, spec, slice_uid, newest)
                if is_partition(spec, driver):
                    _add_partition(inventory, published, ignored_taints)
                    continue
                try:
                    found.append((engine_device(published, ignored_taints), published))
                except (QuantityError, KeyError, ValueError):
                    continue
                inventory.by_key[published.key] = published
    for node_name, found in per_node.items():
        devices = first_of_each_id(device for device, _ in found)
        for device, published in found:
            inventory.by_node_uuid.setdefault((node_name, device.id), published)
        ordered = tuple(sorted(devices, key=lambda d: d.index))
        inventory.nodes[node_name] = Node(node_name, ordered)
    inventory.duplicate_uuids = repeated_ids(
        (device.uuid, device.node) for device in inventory.by_key.values()
    )
    return inventory


def _add_partition(
    inventory: Inventory, published: PublishedDevice, ignored_taints: frozenset[str]
) -> None:
    partition = partition_device(
        published.driver, published.pool, published.node, published.spec, ignored_taints
    )
    if partition is not None:
        inventory.partitions[published.key] = partition
        inventory.partition_devices[published.key] = published
        cards = inventory.partition_cards.setdefault(partition.node, {})
        cards.setdefault(partition.card, []).append(partition)


def _published(
    driver: str, pool: str, node: str, spec: Mapping[str, Any], slice_uid: str, generation: int
) -> PublishedDevice:
    """The device with its engine id: the `uuid` attribute, else `<pool>/<name>`."""
    unnamed = PublishedDevice(driver, pool, node, spec, slice_uid, generation, uuid="")
    uuid = str(unnamed.attribute("uuid") or f"{pool}/{unnamed.name}")
    return PublishedDevice(driver, pool, node, spec, slice_uid, generation, uuid)


def duplicate_uuid_notes(
    current: Mapping[str, tuple[str, ...]], previous: Mapping[str, tuple[str, ...]]
) -> dict[str, str]:
    """Per node, what to tell about its uuids that are newly (or differently) on more
    than one device; nodes with nothing new are left out."""
    changed: dict[str, list[str]] = {}
    for uuid, nodes in current.items():
        if previous.get(uuid) == nodes:
            continue
        for node in dict.fromkeys(nodes):
            others = [n for n in nodes if n != node]
            where = f"{len(nodes) - len(others)} on this node" + (
                f", also on {', '.join(sorted(set(others)))}" if others else ""
            )
            changed.setdefault(node, []).append(f"{uuid} ({where})")
    return {
        node: (
            "device uuids published by more than one device: "
            + "; ".join(entries)
            + ". Each node's devices are allocated on their own and a uuid twice on one node"
            " counts as one card; give every GPU its own uuid (mock file, cloned VM, NVML)."
        )
        for node, entries in sorted(changed.items())
    }


def result_usage(result: Mapping[str, Any], device: PublishedDevice) -> DeviceUsage:
    """What one allocation result holds on a device, in the engine's units.

    A result without consumedCapacity (a whole device, allocated without
    sharing) holds every slot, all memory and all cores.
    """
    consumed = result.get("consumedCapacity")
    if not result.get("shareID") or not consumed:
        whole = engine_device(device, frozenset())
        return DeviceUsage(whole.count, whole.memory_mib, whole.cores)
    amounts: dict[str, Decimal] = {}
    for name, amount in consumed.items():
        try:
            amounts[name.removeprefix(f"{device.driver}/")] = parse_quantity(str(amount))
        except QuantityError:
            continue
    try:
        memory_mib = _mib_ceil(amounts.get("memory", Decimal(0)))
    except QuantityError:
        whole = engine_device(device, frozenset())
        memory_mib = whole.memory_mib
    return DeviceUsage(
        used=max(int(amounts.get("shares", Decimal(1))), 1),
        memory_mib=memory_mib,
        cores=int(amounts.get("cores", Decimal(0))),
    )


def claim_usage(claim: Mapping[str, Any], inventory: Inventory) -> ClaimUsage:
    """Every result of the claim's allocation that names a device in the inventory."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        device = inventory.by_key.get(
            (result.get("driver"), result.get("pool"), result.get("device"))
        )
        if device is not None:
            found.append((device, result_usage(result, device)))
    return found


ClaimUsage = list[tuple[PublishedDevice, DeviceUsage]]
"""What one claim's allocation holds, per device."""


def usage_by_node(
    claims: Iterable[Mapping[str, Any]],
    inventory: Inventory,
    usage_of: Callable[[Mapping[str, Any], Inventory], ClaimUsage] | None = None,
) -> dict[str, dict[str, DeviceUsage]]:
    """Per node, per device uuid: the sum over every allocated claim (two devices with
    one uuid on one node are one engine device, so their shares add up there).
    `usage_of` reads one claim's usage (default `claim_usage`; the view's memo reuses
    what it read before)."""
    read = usage_of or claim_usage
    usage: dict[str, dict[str, DeviceUsage]] = {}
    for claim in claims:
        for device, amount in read(claim, inventory):
            on_node = usage.setdefault(device.node, {})
            on_node[device.uuid] = on_node.get(device.uuid, DeviceUsage()).plus(amount)
    return usage


def quota_ledger(
    quotas: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    inventory: Inventory,
    vendors: VendorRegistry,
) -> QuotaLedger:
    """HAMi's namespace quota per vendor (`dra_driver.objects.quotas`) from ResourceQuotas,
    with what the namespace's allocated claims already hold."""
    ledger = quota_limits(quotas, vendors)
    charge_claims(ledger, claims, inventory, vendors)
    return ledger


def charge_claims(
    ledger: QuotaLedger,
    claims: Iterable[Mapping[str, Any]],
    inventory: Inventory,
    vendors: VendorRegistry,
) -> None:
    """Charge each claim's devices to its namespace's quota of the vendor whose device
    it is (the one whose name the device's type holds, as the engine matches them)."""
    limited = {namespace for namespace, _ in ledger.quotas}
    for claim in claims:
        namespace = (claim.get("metadata") or {}).get("namespace") or ""
        if namespace not in limited:
            continue  # charging a namespace without a quota changes nothing
        for device, amount in claim_usage(claim, inventory):
            vendor = device_vendor(device, vendors)
            if vendor is not None:
                ledger.charge(namespace, vendor, amount.memory_mib, amount.cores)
        for partition in claim_partitions(claim, inventory.partitions):
            charge = partition_charge(partition, inventory, vendors)
            if charge is not None:
                ledger.charge(namespace, *charge)


def partition_charge(
    partition: PartitionDevice, inventory: Inventory, vendors: VendorRegistry
) -> tuple[str, int, int] | None:
    """The vendor whose quota a MIG partition is charged to and what (MiB, cores); None
    when its card has no vendor."""
    vendor = partition_vendor(partition.key, inventory, vendors)
    if vendor is None:
        return None
    memory_mib, cores = partition_amount(partition, inventory.counter_sets)
    return vendor, memory_mib, cores


def partition_vendor(
    key: tuple[str, str, str], inventory: Inventory, vendors: VendorRegistry
) -> str | None:
    """The vendor of a partition device's card (None when unknown or no vendor's)."""
    published = inventory.partition_devices.get(key)
    return None if published is None else device_vendor(published, vendors)


def device_vendor(device: PublishedDevice, vendors: VendorRegistry) -> str | None:
    """The vendor whose quota a share of the device is charged to: the one whose name
    the device's type holds, as the engine matches them (None when no vendor does)."""
    vendor = next((v for v in vendors if v.matches(str(device.attribute("type")))), None)
    return None if vendor is None else vendor.name
