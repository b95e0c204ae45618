"""Whether a pod fits one node, counted device by device, for preemption's dry run. Pure.

The reprieve loop (preemption.py) asks one yes/no question per holder given
back: does the pod still fit? For most pods the answer needs no placement.
HAMi's standard Fit for a container with one device request, no NUMA binding,
no namespace quota on its (namespace, vendor), of a vendor without a Fit of its
own, judges each device by its own usage alone and takes the first `count`
devices that pass (the topology-aware policy then chooses among all that pass,
and still fits iff enough do): the node fits iff at least `count` devices pass
the per-device checks. That is the engine's own `SingleRequestJudge` (the same
checks, verdicts remembered per device facts), so a give-back re-judges only the
devices it touches.

`decide_pod` adds to the engine's fit only what can refuse a *placed* device,
so counting is used only where none of it can change the yes/no:

- one variant (the only one `decide_pod` tries), and exactly one container,
  init or app, that asks for devices (later containers depend on earlier grants);
- no constraint in any of its claims (`_distinct_conflict` reads nothing else),
  and every request of each claim is one the engine places (one of its result
  names): a request decided beside the engine (a MIG partition) is not counted;
- every device of the node is in HAMi-core mode and no share on it carries a tag
  (`untagged`): a device in another mode (MIG), or holding a vendor's tagged
  shares, may be judged by more than its counts;
- the node is refused by no capacity screen (`_policy_refusals`, node-wide), and
  `plan_results` refuses none of its devices whatever the engine grants there: a
  device without `allowMultipleAllocations` is never checked; one with it must
  publish only the capacities the engine already parsed into the device (memory,
  cores, shares), none with a requestPolicy, every capacity the claims request,
  and the requested amounts must be quantities. Then `consumed_capacity` takes the
  request or the published value as it is and refuses nothing.

Anything else is left to `decide_pod`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.quantity import QuantityError, parse_quantity
from controller.inventory import Inventory, PublishedDevice
from controller.requests import CapacityScreen, PodVariant
from dra_driver.engine.engine import NodeState
from dra_driver.engine.model import HAMI_CORE_MODE, DeviceUsage
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.single_request import DeviceProfile, SingleRequestJudge
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import requested_capacity

ENGINE_CAPACITIES = frozenset({"memory", "cores", "shares"})
"""Capacities `engine_device` parses into the device: a device in the inventory has
readable values for those it publishes."""
_IDLE = DeviceUsage()


@dataclass(frozen=True, slots=True)
class CountedRequest:
    """A pod whose fit on a node can be counted (module docstring), node aside."""

    judge: SingleRequestJudge
    requested: frozenset[str]
    """The capacities its claims request, as written."""
    screens: tuple[CapacityScreen, ...]

    def on_node(self, state: NodeState, inventory: Inventory) -> PassingDevices | None:
        """A count over the node's devices, or None when `decide_pod` may refuse a
        placement there that the count would take."""
        node = state.node.name
        if any(node in screen.nodes for screen in self.screens) or any(
            device.mode != HAMI_CORE_MODE for device in state.node.devices
        ):
            return None
        for device_id in state.ids:
            device = inventory.by_node_uuid.get((node, device_id))
            if device is None or not _serves_any_grant(device, self.requested):
                return None
        return PassingDevices(self.judge, state.ids, state.profiles)


def counted_request(
    variants: Sequence[PodVariant],
    vendors: VendorRegistry,
    gpu_policy: str,
    quota: QuotaLedger | None,
) -> CountedRequest | None:
    """The pod's counted request, or None when only `decide_pod` can answer.

    `gpu_policy` is the engine's default, `quota` its ledger (a quota on the pod's
    namespace and vendor makes devices depend on each other)."""
    if len(variants) != 1:
        return None
    (variant,) = variants
    pod = variant.request
    asking = [c for c in pod.all_containers if any(r.count > 0 for r in c)]
    if len(asking) != 1 or any(r.vendor not in vendors for r in asking[0]):
        return None
    try:
        policy = parse_gpu_policy(pod.gpu_policy or gpu_policy)
    except InvalidParameterError:
        return None  # The engine says why, if a trial ever asks it.
    judge = SingleRequestJudge.for_container(asking[0], pod.namespace, policy, vendors, quota)
    if judge is None:
        return None
    requested: set[str] = set()
    for claim_variant in variant.claims:
        devices = (claim_variant.claim.get("spec") or {}).get("devices") or {}
        placed = len(devices.get("requests") or ())
        if devices.get("constraints") or placed > len(claim_variant.result_names):
            return None
        for name in claim_variant.result_names:
            asked = requested_capacity(claim_variant.claim, name)
            if not _quantities(asked.values()):
                return None
            requested.update(asked)
    screens = tuple(screen for c in variant.claims for screen in c.screens)
    return CountedRequest(judge, frozenset(requested), screens)


class PassingDevices:
    """Per device of one node, whether it passes for the request at the usage of the
    last fit, and how many do."""

    __slots__ = ("_count", "_judge", "_passing", "_profiles")

    def __init__(
        self, judge: SingleRequestJudge, ids: Sequence[str], profiles: Sequence[DeviceProfile]
    ) -> None:
        self._judge = judge
        self._profiles = dict(zip(ids, profiles, strict=True))
        self._passing: dict[str, bool] = {}
        self._count = 0

    def fits(self, usage: Mapping[str, DeviceUsage]) -> bool:
        """Whether the pod fits at `usage` (a device it leaves out holds nothing); a
        fit becomes the usage `fits_with` starts from."""
        passing = {
            device_id: self._passes(device_id, usage.get(device_id, _IDLE))
            for device_id in self._profiles
        }
        count = sum(passing.values())
        if count < self._judge.wanted:
            return False
        self._passing, self._count = passing, count
        return True

    def fits_with(self, changed: Mapping[str, DeviceUsage]) -> bool:
        """Whether the pod still fits with the devices of `changed` at that usage
        instead; a fit becomes the usage the next call starts from."""
        passing = self._passing
        count = self._count
        now: list[tuple[str, bool]] = []
        for device_id, usage in changed.items():
            passes = self._passes(device_id, usage)
            count += passes - passing[device_id]
            now.append((device_id, passes))
        if count < self._judge.wanted:
            return False
        passing.update(now)
        self._count = count
        return True

    def _passes(self, device_id: str, usage: DeviceUsage) -> bool:
        fact = (*self._profiles[device_id], usage.used, usage.memory_mib, usage.cores)
        return self._judge.passes(fact, device_id)


def untagged(usage: Iterable[DeviceUsage]) -> bool:
    """Whether no share in `usage` carries a tag: only then does counting judge it."""
    return not any(amount.tags for amount in usage)


def _serves_any_grant(device: PublishedDevice, requested: frozenset[str]) -> bool:
    """Whether `plan_results` accepts the device whatever the engine grants on it."""
    if not device.spec.get("allowMultipleAllocations"):
        return True
    capacities = device.capacity()
    return (
        capacities.keys() <= ENGINE_CAPACITIES
        and requested <= capacities.keys()
        and all(_plain(entry) for entry in capacities.values())
    )


def _plain(entry: Any) -> bool:
    """A published capacity with a value and no requestPolicy."""
    return isinstance(entry, Mapping) and "value" in entry and "requestPolicy" not in entry


def _quantities(amounts: Iterable[Any]) -> bool:
    """Whether every amount reads as a quantity, as `consumed_capacity` reads it."""
    try:
        for amount in amounts:
            if not isinstance(amount, Decimal):
                parse_quantity(str(amount))
    except QuantityError:
        return False
    return True
