"""Huawei Ascend NPUs: one backend per chip of the `vnpus:` section (`--enable-ascend`).

Each chip config (910A, 910B2/B3/B4, 310P, 910C, ...) is its own vendor whose
request Type, register key, handshake, uuid filters and pod keys all carry its
`commonWord`. The rules where Ascend differs from HAMi's standard path, each
small here:

- templates: in hard split (the default) the webhook rounds a memory request up
  to the smallest vNPU template that holds it; above the largest template but
  within `memoryCapacity` it becomes `memoryAllocatable` (the whole chip);
  beyond that it is refused. A `-core` request is refused, as the template fixes
  the AI Cores. The pod annotation `huawei.com/vnpu-mode: hami-core` asks for
  the soft split instead: raw memory and `-core` kept, and only nodes whose
  `hami-vnpu-core` annotation (default: `hamiVnpuCore`) says "true" take it.
- topology: on `Ascend910*` chips whose every device registers a NetworkID,
  Fit collects every device that fits and takes them by NetworkID, largest group
  first; ScoreNode is 10 x the share of each container's devices on its most
  common NetworkID.
- 910C: NPUs come two to a module (index // 2). Fit of more than one takes
  whole modules only; with `superPod` the webhook rounds a count of 1 up to 2 and
  refuses any other odd count.
- the scheduler writes the runtime JSON `huawei.com/<commonWord>` (uuid, template
  or raw share) and `predicate-time` beside the usual pod keys.

Faithful to HAMi at 4707fb02 (pkg/device/ascend) except where its own answer
would be undefined or would break a pod; each such place says so. Reference:
hami-vendors.md (Ascend); the DRA side is docs/vendors.md (Ascend).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import AnnotationDecodeError, RegisteredDevice, decode_node_devices_json
from api.hami_annotations.go_compat import marshal_go_json
from api.quantity import QuantityError, canonical_quantity, parse_quantity
from dra_driver.engine import reasons
from dra_driver.engine.fit import FULL_CARD_CORES
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Node
from dra_driver.engine.requests import ContainerRequest, DeviceRequest
from dra_driver.engine.vendor_backends.adapters import chip_keys, vendor_resources
from dra_driver.engine.vendor_backends.ascend_chips import (
    HAMI_DEFAULT_SECTION,
    VnpuChip,
    VnpusConfig,
)
from dra_driver.engine.vendor_backends.base import (
    NO_PATCH_CONTEXT,
    BackendFamily,
    ContainerMutation,
    PatchContext,
    VendorBackend,
    VendorNodeDevices,
    annotations_of,
    engine_device,
)
from dra_driver.engine.vendor_backends.fit_checks import sharing_refusal
from dra_driver.engine.vendor_backends.reading import INT32_MAX, resource_value
from dra_driver.engine.vendors import FitContext, VendorAdapter
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_workloads import vendor_filters

VNPU_MODE = "huawei.com/vnpu-mode"
"""Pod annotation; `hami-core` asks for the soft split."""
HAMI_CORE = "hami-core"
NODE_HAMI_CORE = "hami-vnpu-core"
"""Node annotation: "true" when the node runs the soft split (overrides `hamiVnpuCore`)."""
HARD_SPLIT = "vnpu"
"""The engine `Device.mode` of a chip on a node without the soft split."""
PREDICATE_TIME = "predicate-time"
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
TOPOLOGY_PREFIX = "Ascend910"
NETWORK_ID = "NetworkID"
NETWORK_WEIGHT = 10
MODULE_CHIP = "Ascend910C"
NPUS_PER_MODULE = 2
MODE_NOT_FIT = "ModeNotFit"
MULTI_DEVICE_REFUSAL = "vNPU not supported for multiple devices"
NO_DEVICE_FOUND = f"{reasons.NODE_UNREGISTERED}: no device found on node"


@dataclass(frozen=True, slots=True)
class ChipAdapter(VendorAdapter):
    """An Ascend chip's adapter: a device is the chip's when its type is exactly the
    commonWord. HAMi keys a node's devices by the register annotation they come
    from, never by a substring of their type, and `Ascend910B4` is a substring of
    `Ascend910B4-1`."""

    def matches(self, device_type: str) -> bool:
        return device_type == self.name


def _quantity(raw: Any, field: str) -> Decimal:
    """A resource value's exact quantity; a malformed one is refused naming its field."""
    try:
        return parse_quantity(str(raw))
    except QuantityError as error:
        raise InvalidParameterError(field, error.reason) from None


def _int64(value: Decimal) -> int | None:
    """Quantity.AsInt64: the value when it is a whole number within int64."""
    if value != value.to_integral_value() or abs(value) >= 1 << 63:
        return None
    return int(value)


class AscendBackend(VendorBackend):
    """One chip of the `vnpus:` section; `section` is the whole section, for the
    global `hamiVnpuCore` and for which containers ask for any Ascend chip."""

    def __init__(self, chip: VnpuChip, section: VnpusConfig | None = None) -> None:
        self.chip = chip
        self.section = section or VnpusConfig(configs=(chip,))
        word = chip.common_word
        adapter = ChipAdapter(
            name=word,
            common_word=word,
            resources=vendor_resources(
                chip.resource_name, chip.resource_memory_name, chip.resource_core_name
            ),
            annotations=chip_keys(word, mode=VNPU_MODE),
            memory_factor=max(chip.memory_factor, 1),
            default_count=0,
            read_request=self.read_request,
            fit=self.fit,
            score=self.score,
        )
        super().__init__(
            adapter,
            register_key=f"hami.io/node-register-{word}",
            handshake_key=f"hami.io/node-handshake-{word}",
        )
        self.runtime_json_key = f"huawei.com/{word}"

    @property
    def runtime_class_name(self) -> str:
        return self.chip.runtime_class_name

    # -- requests (GenerateResourceRequests)

    def read_request(
        self,
        container: Mapping[str, Any],
        annotations: Mapping[str, str],
        where: str,
        dropped: list[str] | None,
    ) -> DeviceRequest | None:
        """The count (limits, then requests), MB memory x `memoryFactor`, `-core` percent.
        No memory is the whole chip (100 %); HAMi drops, rather than refuses, a count
        outside 1..MaxInt32, a negative memory, one beyond MaxInt32 before or after the
        factor (a byte quantity such as 16Gi), and a core value outside 0..MaxInt32."""
        chip = self.chip
        raw_count = resource_value(container, chip.resource_name)
        if raw_count is None:
            return None
        count = _int64(_quantity(raw_count, f"{where}.resources.{chip.resource_name}"))
        if count is None:
            return self._drop(dropped, where, chip.resource_name, f"{raw_count} is not whole")
        if not 0 < count <= INT32_MAX:
            return self._drop(
                dropped, where, chip.resource_name, f"count {raw_count} is out of range"
            )
        memory = 0
        raw_memory = resource_value(container, chip.resource_memory_name)
        if raw_memory is not None:
            value = _quantity(raw_memory, f"{where}.resources.{chip.resource_memory_name}")
            if value < 0:
                return self._drop(dropped, where, chip.resource_memory_name, "is negative")
            whole = _int64(value)
            if whole is not None:
                scaled = whole * self.adapter.memory_factor
                if whole > INT32_MAX or scaled > INT32_MAX:
                    why = (
                        f"{raw_memory} MB x memoryFactor {self.adapter.memory_factor} exceeds "
                        "int32; Ascend memory is in MB, not bytes (ask 16384 for 16 GB)"
                    )
                    return self._drop(dropped, where, chip.resource_memory_name, why)
                memory = scaled
        cores = 0
        raw_cores = resource_value(container, chip.resource_core_name)
        if raw_cores is not None:
            field = f"{where}.resources.{chip.resource_core_name}"
            value = _quantity(raw_cores, field).to_integral_value(ROUND_CEILING)
            if not 0 <= value <= INT32_MAX:
                return self._drop(dropped, where, chip.resource_core_name, "is out of range")
            cores = int(value)
        return DeviceRequest(
            vendor=self.name,
            count=count,
            memory_mib=memory,
            memory_percent=100 if memory == 0 else 0,
            cores=cores,
            filters=vendor_filters(self.adapter, annotations),
        )

    def _drop(self, dropped: list[str] | None, where: str, resource: str, why: str) -> None:
        if dropped is not None:
            dropped.append(
                f"{where}.resources.{resource}: {why}; HAMi ignores this {self.name} request, "
                "so the container gets no NPU"
            )

    # -- webhook (MutateAdmission)

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """Round the count (910C superPod) and the memory (hard split) and write the
        memory into limits and requests. A container without this chip only gets
        `ASCEND_VISIBLE_DEVICES=""` under `overwriteEnv`, see `_hides_npus`."""
        chip = self.chip
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if chip.resource_name not in limits:
            return ContainerMutation(False, env=self._hides_npus(limits))
        count_field = f"{where}.resources.limits.{chip.resource_name}"
        count = int(
            _quantity(limits[chip.resource_name], count_field).to_integral_value(ROUND_CEILING)
        )
        new_limits: dict[str, str] = {}
        new_requests: dict[str, str] = {}
        if chip.common_word == MODULE_CHIP and chip.super_pod:
            if count == 1:
                new_limits[chip.resource_name] = "2"
                if chip.resource_name in (resources.get("requests") or {}):
                    new_requests[chip.resource_name] = "2"
            elif count % 2:
                raise InvalidParameterError(
                    count_field, f"Ascend910C device request must be 1 or 2*n, got {count}"
                )
        hami_core = annotations_of(pod).get(VNPU_MODE) == HAMI_CORE
        if not hami_core and chip.resource_core_name:
            core_field = f"{where}.resources.{chip.resource_core_name}"
            raw_core = resource_value(container, chip.resource_core_name)
            if raw_core is not None and _quantity(raw_core, core_field) > 0:
                raise InvalidParameterError(
                    core_field,
                    f"{chip.resource_core_name} is only supported in hami-core (soft split) mode",
                )
        memory = chip.memory_allocatable
        if chip.resource_memory_name in limits:
            memory_field = f"{where}.resources.limits.{chip.resource_memory_name}"
            raw = limits[chip.resource_memory_name]
            asked = int(_quantity(raw, memory_field).to_integral_value(ROUND_CEILING))
            memory = asked if hami_core else chip.trim(asked)[0]
            if memory <= 0 and not hami_core:
                raise InvalidParameterError(
                    memory_field, f"{chip.resource_memory_name} {asked} is invalid"
                )
        if count > 1 and not hami_core and memory != chip.memory_allocatable:
            raise InvalidParameterError(count_field, MULTI_DEVICE_REFUSAL)
        written = canonical_quantity(str(memory))
        new_limits[chip.resource_memory_name] = written
        new_requests[chip.resource_memory_name] = written
        return ContainerMutation(True, limits=new_limits, requests=new_requests)

    def _hides_npus(self, limits: Mapping[str, Any]) -> tuple[Mapping[str, str], ...]:
        """`ASCEND_VISIBLE_DEVICES=""` for a container that asks for no Ascend chip at all,
        added once, by the first chip with `overwriteEnv`. HAMi's every chip adds it to
        each container without *its own* resource, which hides the NPUs of a container
        that asks for another chip; that is the one place this backend differs."""
        first = next((c for c in self.section.configs if c.overwrite_env), None)
        if first is None or first.common_word != self.chip.common_word:
            return ()
        if any(chip.resource_name in limits for chip in self.section.configs):
            return ()
        return ({"name": VISIBLE_DEVICES_ENV, "value": ""},)

    # -- node devices (GetNodeDevices, CheckHealth)

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        assert self.register_key is not None
        return decode_node_devices_json(value, self.register_key)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """The JSON register's devices, every one this chip's whatever its `type` (HAMi's
        DeviceVendor; the engine's type becomes the commonWord), in mode `hami-core`
        when the node runs the soft split, else `vnpu`; an empty list is HAMi's
        "no device found on node"."""
        assert self.register_key is not None
        register = annotations_of(node).get(self.register_key)
        if register is None:
            return VendorNodeDevices(self.name)
        try:
            decoded = self.decode_register(register)
        except AnnotationDecodeError as error:
            return VendorNodeDevices(
                self.name, (), register, f"{reasons.NODE_UNREGISTERED}: {error}"
            )
        if not decoded:
            return VendorNodeDevices(self.name, (), register, NO_DEVICE_FOUND)
        healthy = not self.plugin_gone(node, now, handshake_timeout)
        mode = HAMI_CORE if self.node_runs_hami_core(node) else HARD_SPLIT
        devices = tuple(
            replace(engine_device(device, healthy), type=self.name, mode=mode) for device in decoded
        )
        return VendorNodeDevices(self.name, devices, register, "", healthy)

    def node_runs_hami_core(self, node: Mapping[str, Any]) -> bool:
        """The node's `hami-vnpu-core` annotation when present, else `hamiVnpuCore`."""
        value = annotations_of(node).get(NODE_HAMI_CORE)
        return self.section.hami_vnpu_core if value is None else value == "true"

    # -- Fit

    def fit(
        self,
        slots: Sequence[Slot],
        request: DeviceRequest,
        ctx: FitContext,
        earlier: Sequence[ContainerGrants],
    ) -> tuple[list[Grant] | None, str]:
        """HAMi's Ascend Fit: the standard checks without quota or cordons, a hami-core
        pod only on a hami-core node (`ModeNotFit`), 100 cores per chip for it, then
        NetworkID grouping or 910C modules when those apply."""
        hami_core = request.filters.modes == HAMI_CORE
        if hami_core and not all(slot.device.mode == HAMI_CORE for slot in slots):
            return None, reasons.format_reason({MODE_NOT_FIT: 1}, len(slots))
        wanted = remaining = request.count
        topology = self.name.startswith(TOPOLOGY_PREFIX) and all(
            NETWORK_ID in slot.device.custom_info for slot in slots
        )
        modules = request.vendor == MODULE_CHIP and wanted > 1
        take_all = topology or modules
        cores = request.cores
        failed: Counter[str] = Counter()
        picks: list[Grant] = []
        for slot in reversed(slots):
            device = slot.device
            if not device.healthy:
                failed[reasons.CARD_NOT_HEALTH] += 1
                continue
            if request.vendor != self.name:
                failed[reasons.CARD_TYPE_MISMATCH] += 1
                continue
            if refusal := sharing_refusal(slot, request.filters, ctx.policy.mutex):
                failed[refusal] += 1
                continue
            cores = min(cores, FULL_CARD_CORES)
            memory = request.memory_on(device.memory_mib)
            if device.memory_mib - slot.memory < memory:
                failed[reasons.CARD_INSUFFICIENT_MEMORY] += 1
                continue
            total_cores = FULL_CARD_CORES if hami_core else device.cores
            if total_cores - slot.cores < cores:
                failed[reasons.CARD_INSUFFICIENT_CORE] += 1
                continue
            if total_cores == FULL_CARD_CORES and cores == FULL_CARD_CORES and slot.used > 0:
                failed[reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
                continue
            if total_cores != 0 and slot.cores == total_cores and cores == 0:
                failed[reasons.CARD_COMPUTE_UNITS_EXHAUSTED] += 1
                continue
            if remaining > 0:
                if not take_all:
                    remaining -= 1
                picks.append(Grant(device.id, request.vendor, memory, cores, device.index))
            if remaining == 0 and not take_all:
                return picks, ""
        if modules:
            chosen = whole_modules(picks, wanted)
            if len(chosen) != wanted:
                failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
                return None, reasons.format_reason(failed, wanted)
            return chosen, ""
        if topology and len(picks) >= wanted:
            networks = {slot.device.id: slot.device.custom_info[NETWORK_ID] for slot in slots}
            chosen = picks[:1] if wanted == 1 else by_network(picks, wanted, networks)
            if len(chosen) == wanted:
                return chosen, ""
            picks = chosen
        if picks:
            failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picks)
        return None, reasons.format_reason(failed, len(slots))

    # -- ScoreNode

    def score(
        self,
        node: Node,
        grants: Sequence[ContainerGrants],
        container_requests: Sequence[ContainerRequest],
        node_policy: str,
    ) -> float:
        """10 x, summed over containers, the share of a container's devices on its most
        common NetworkID; 0 for non-910 chips and when a granted device has none."""
        if not self.name.startswith(TOPOLOGY_PREFIX):
            return 0.0
        info = {device.id: device.custom_info for device in node.devices}
        total = 0.0
        for container in grants:
            counts: Counter[int] = Counter()
            mine = [grant for grant in container if grant.vendor == self.name]
            for grant in mine:
                custom = info.get(grant.uuid) or {}
                if NETWORK_ID not in custom:
                    return 0.0
                network = _network(custom[NETWORK_ID])
                if network is not None:
                    counts[network] += 1
            if counts:
                total += max(counts.values()) / sum(counts.values())
        return total * NETWORK_WEIGHT

    # -- pod annotations (PatchAnnotations)

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """Both pod keys, `predicate-time` (Filter's `hami.io/vgpu-time`) and the runtime
        JSON, whose hami-core form the pod's own `huawei.com/vnpu-mode` (under the
        annotations Filter set, in `context.assigned`) selects."""
        result = super().pod_annotations(containers)
        if not result:
            return result
        assigned = context.assigned
        result[PREDICATE_TIME] = assigned.get(keys.VGPU_TIME) or str(int(time.time()))
        hami_core = assigned.get(VNPU_MODE) == HAMI_CORE
        result[self.runtime_json_key] = self.runtime_json(containers, hami_core)
        return result

    def runtime_json(self, containers: Sequence[ContainerGrants], hami_core: bool) -> str:
        """`huawei.com/<commonWord>`: `[{UUID, temp, memory, core}]` per granted device in
        container order, empty fields left out (Go omitempty); `temp` is the template
        the memory trims to, absent in hami-core mode."""
        entries = []
        for container in self.container_devices(containers):
            for device in container:
                entry = {
                    "UUID": device.uuid,
                    "temp": "" if hami_core else self.chip.trim(device.usedmem)[1],
                    "memory": device.usedmem,
                    "core": device.usedcores,
                }
                entries.append({key: value for key, value in entry.items() if value})
        return marshal_go_json(entries)


def whole_modules(picks: Sequence[Grant], wanted: int) -> list[Grant]:
    """computeBestCombination910C: group the candidates by module (index // 2), fullest
    first, and take whole two-NPU modules until `wanted` is reached (which may
    overshoot an odd count). Modules of equal size keep the order Fit met them in
    (HAMi's map order is random)."""
    modules: dict[int, list[Grant]] = {}
    for grant in picks:
        modules.setdefault(grant.index // NPUS_PER_MODULE, []).append(grant)
    chosen: list[Grant] = []
    for module in sorted(modules.values(), key=len, reverse=True):
        if len(chosen) >= wanted:
            break
        if len(module) == NPUS_PER_MODULE:
            chosen.extend(module)
    return chosen


def by_network(picks: Sequence[Grant], wanted: int, networks: Mapping[str, Any]) -> list[Grant]:
    """computeBestCombination: the candidates grouped by numeric NetworkID, largest group
    first (ties in the order Fit met them), taken until `wanted`. A candidate whose
    NetworkID is not a number joins no group; HAMi then hands out fewer devices than
    asked, Fit here refuses the node instead."""
    groups: dict[int, list[Grant]] = {}
    for grant in picks:
        network = _network(networks.get(grant.uuid))
        if network is not None:
            groups.setdefault(network, []).append(grant)
    ordered = [grant for group in sorted(groups.values(), key=len, reverse=True) for grant in group]
    return ordered[:wanted]


def _network(value: Any) -> int | None:
    """A JSON number as Go's `int(float64)` reads it; anything else is no NetworkID."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def build(section: VnpusConfig) -> tuple[AscendBackend, ...]:
    """One backend per chip, each knowing the whole section."""
    return tuple(AscendBackend(chip, section) for chip in section.configs)


FAMILY = BackendFamily(
    section="vnpus",
    model=VnpusConfig,
    build=build,
    default=HAMI_DEFAULT_SECTION,
    enable_flag="enable-ascend",
)
