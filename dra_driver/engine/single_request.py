"""A node's refusal of a pod, counted one device request at a time.

For a container that asks for one vendor request without NUMA binding or a
namespace quota, of a vendor with HAMi's standard Fit, that Fit judges each
device on its own: which check a device fails does not depend on the devices
taken before it, and a refusal walks every device. The refusal's `k/N Reason`
counts are then the same in any device order, so they can be counted without
scoring, sorting or copying the node. Devices are judged by their
`DeviceFacts`, and devices with equal facts share one verdict per decision.
Init containers and the first app container are fitted on the node as it is,
so each of them can be judged this way, in HAMi's order, until one refuses:
that refusal is the node's. This is what makes a decision that fits nowhere
cheap on large clusters; a node that takes the judged containers gets the
full fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.engine import reasons
from dra_driver.engine.fit import FULL_CARD_CORES, type_and_mode_allowed, uuid_allowed
from dra_driver.engine.grants import Slot
from dra_driver.engine.model import Device
from dra_driver.engine.policy import GpuPolicy
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    ContainerRequest,
    DeviceRequest,
    PodRequest,
)
from dra_driver.engine.vendors import VendorAdapter, VendorRegistry

DeviceProfile = tuple[str, str, int, int, int, int]
"""What Fit reads of a registered device that usage does not change: type, mode,
status (usable, unhealthy or cordoned), slot count, total MiB, total cores."""

DeviceFacts = tuple[str, str, int, int, int, int, int, int, int]
"""A device's profile followed by its usage: slots used, MiB used, cores used."""

_USABLE, _UNHEALTHY, _CORDONED_STATUS = range(3)

_CHECKS = (
    reasons.CARD_NOT_HEALTH,
    reasons.CARD_CORDONED,
    reasons.CARD_TYPE_MISMATCH,
    reasons.CARD_UUID_MISMATCH,
    reasons.CARD_TIME_SLICING_EXHAUSTED,
    reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
    reasons.CARD_INSUFFICIENT_MEMORY,
    reasons.CARD_INSUFFICIENT_CORE,
    reasons.CARD_COMPUTE_UNITS_EXHAUSTED,
)
"""Fit's per-device checks in HAMi's order; both exclusivity checks share one name."""
(
    _NOT_HEALTH,
    _CORDONED,
    _TYPE,
    _UUID,
    _SLOTS,
    _EXCLUSIVE,
    _MEMORY,
    _CORES,
    _UNITS,
    _PASSED,
    _OTHER_VENDOR,
) = range(len(_CHECKS) + 2)


def device_profile(device: Device, cordoned: frozenset[str]) -> DeviceProfile:
    """The part of a device's facts that lasts as long as its node's inventory."""
    if not device.healthy:
        status = _UNHEALTHY
    elif device.id in cordoned:
        status = _CORDONED_STATUS
    else:
        status = _USABLE
    return (device.type, device.mode, status, device.count, device.memory_mib, device.cores)


def device_facts(
    profiles: Sequence[DeviceProfile], slots: Sequence[Slot]
) -> tuple[DeviceFacts, ...]:
    """Each device's facts now: its profile and its slot's usage (same order)."""
    return tuple(
        (*profile, slot.used, slot.memory, slot.cores)
        for profile, slot in zip(profiles, slots, strict=True)
    )


class SingleRequestJudge:
    """Counts HAMi's per-device refusals of one request, node after node.

    Build it with `for_container`, once per decision: verdicts per distinct
    device facts and formatted reasons are remembered across its nodes.
    """

    __slots__ = (
        "_cores",
        "_fixed_memory",
        "_formatted",
        "_kinds",
        "_mutex",
        "_percent",
        "_request",
        "_uuids",
        "_vendor",
        "_verdicts",
    )

    def __init__(self, request: DeviceRequest, vendor: VendorAdapter, policy: GpuPolicy) -> None:
        self._request = request
        self._vendor = vendor
        self._mutex = policy.mutex
        self._cores = min(request.cores, FULL_CARD_CORES)
        self._fixed_memory = max(request.memory_mib, 0)
        self._percent = (
            request.memory_percent
            if request.memory_percent != MEMORY_PERCENT_UNSET and request.memory_mib == 0
            else None
        )
        self._uuids = bool(request.filters.use_uuids or request.filters.no_use_uuids)
        self._verdicts: dict[DeviceFacts, int] = {}
        self._kinds: dict[tuple[str, str], int] = {}
        self._formatted: dict[tuple[int, ...], str] = {}

    @classmethod
    def for_container(
        cls,
        container: ContainerRequest,
        namespace: str,
        policy: GpuPolicy,
        vendors: VendorRegistry,
        quota: QuotaLedger | None,
    ) -> SingleRequestJudge | None:
        """A judge when the container is one request whose devices are judged
        independently; None when only the full fit knows its reasons."""
        if len(container) != 1:
            return None
        (request,) = container
        if request.count <= 0 or request.filters.numa_bind:
            return None
        if quota is not None and (namespace, request.vendor) in quota.quotas:
            return None
        vendor = vendors.get(request.vendor)
        if vendor.fit is not None:
            return None
        return cls(request, vendor, policy)

    def refusal(self, facts: Sequence[DeviceFacts], ids: Sequence[str]) -> str | None:
        """HAMi's reason for a node with these devices (`facts`, `ids` in the same
        order) refusing the request, or None when the node fits it."""
        if not facts:
            return reasons.NODE_HAS_NO_DEVICES
        counts = [0] * (_OTHER_VENDOR + 1)
        if self._uuids:
            for fact, device_id in zip(facts, ids, strict=True):
                counts[self._verdict(fact, device_id)] += 1
        else:
            verdicts = self._verdicts
            for fact in facts:
                verdict = verdicts.get(fact)
                if verdict is None:
                    verdict = self._judge(fact)
                counts[verdict] += 1
        cards = len(facts) - counts[_OTHER_VENDOR]
        passed = counts[_PASSED]
        if self._request.count > cards:
            return reasons.NODE_INSUFFICIENT_DEVICE
        if passed >= self._request.count:
            return None
        key = tuple(counts)
        text = self._formatted.get(key)
        if text is None:
            failed = {name: n for name, n in zip(_CHECKS, counts, strict=False) if n}
            if passed:
                failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = passed
            text = self._formatted[key] = reasons.format_reason(failed, cards)
        return text

    @property
    def wanted(self) -> int:
        """How many devices the request asks for."""
        return self._request.count

    def passes(self, fact: DeviceFacts, device_id: str) -> bool:
        """Whether Fit would take this device (`fact`, `device_id`) for the request:
        it passes every per-device check, uuid filters included. The node fits the
        request iff at least `wanted` of its devices pass."""
        return self._verdict(fact, device_id) == _PASSED

    def _verdict(self, fact: DeviceFacts, device_id: str) -> int:
        """The first check of HAMi's Fit this device fails, uuid filters included."""
        verdict = self._verdicts.get(fact)
        if verdict is None:
            verdict = self._judge(fact)
        if (
            self._uuids
            and _SLOTS <= verdict <= _PASSED
            and not uuid_allowed(self._request.filters, device_id)
        ):
            return _UUID
        return verdict

    def _judge(self, fact: DeviceFacts) -> int:
        """The first check of HAMi's Fit this device fails (the uuid check aside),
        `_PASSED`, or `_OTHER_VENDOR` when Fit never sees the device."""
        device_type, mode, status, count, memory, cores, used, memory_used, cores_used = fact
        wanted_cores = self._cores
        wanted_memory = (
            self._fixed_memory if self._percent is None else memory * self._percent // 100
        )
        kind = self._kinds.get((device_type, mode))
        if kind is None:
            kind = self._kind(device_type, mode)
        if kind == _OTHER_VENDOR:
            verdict = _OTHER_VENDOR
        elif status == _UNHEALTHY:
            verdict = _NOT_HEALTH
        elif status == _CORDONED_STATUS:
            verdict = _CORDONED
        elif kind == _TYPE:
            verdict = _TYPE
        elif count <= used:
            verdict = _SLOTS
        elif self._mutex and used > 0:
            verdict = _EXCLUSIVE
        elif memory - memory_used < wanted_memory:
            verdict = _MEMORY
        elif cores - cores_used < wanted_cores:
            verdict = _CORES
        elif cores == FULL_CARD_CORES and wanted_cores == FULL_CARD_CORES and used > 0:
            verdict = _EXCLUSIVE
        elif cores != 0 and cores_used == cores and wanted_cores == 0:
            verdict = _UNITS
        else:
            verdict = _PASSED
        self._verdicts[fact] = verdict
        return verdict

    def _kind(self, device_type: str, mode: str) -> int:
        """`_OTHER_VENDOR`, `_TYPE` (filtered out by type or mode) or `_PASSED`."""
        if not self._vendor.matches(device_type):
            kind = _OTHER_VENDOR
        elif not type_and_mode_allowed(self._request.filters, device_type, mode):
            kind = _TYPE
        else:
            kind = _PASSED
        self._kinds[(device_type, mode)] = kind
        return kind


class PodJudge:
    """The containers HAMi fits first, judged in HAMi's order (init containers,
    then the first app container), as far as each can be judged alone."""

    __slots__ = ("_judges",)

    def __init__(self, judges: Sequence[SingleRequestJudge]) -> None:
        self._judges = judges

    @classmethod
    def for_pod(
        cls,
        pod: PodRequest,
        policy: GpuPolicy,
        vendors: VendorRegistry,
        quota: QuotaLedger | None,
    ) -> PodJudge | None:
        """Judges for the leading containers that can be judged alone; None when
        the first container with devices cannot be."""
        fitted_alone = [c for c in pod.init_containers if _asks(c)]
        fitted_alone.extend([c for c in pod.containers if _asks(c)][:1])
        judges = []
        for container in fitted_alone:
            judge = SingleRequestJudge.for_container(
                container, pod.namespace, policy, vendors, quota
            )
            if judge is None:
                break
            judges.append(judge)
        return cls(judges) if judges else None

    def refusal(self, facts: Sequence[DeviceFacts], ids: Sequence[str]) -> str | None:
        """HAMi's reason for a node with these devices refusing one of the judged
        containers; None when it takes them all (the full fit decides the rest)."""
        for judge in self._judges:
            reason = judge.refusal(facts, ids)
            if reason is not None:
                return reason
        return None


def _asks(container: ContainerRequest) -> bool:
    """Whether Fit places this container at all (HAMi skips one asking for nothing)."""
    return any(request.count > 0 for request in container)
