"""What a workload asks for, per container (or per claim request) and vendor."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import NoReturn

from api.hami_annotations import DEVICE_SCORING_WEIGHTS
from dra_driver.errors import InvalidParameterError

MEMORY_PERCENT_UNSET = 101
"""HAMi's sentinel for "no percentage given" (ContainerDeviceRequest.MemPercentagereq)."""


@dataclass(frozen=True, slots=True)
class DeviceFilters:
    """Which devices a request may land on (HAMi's per-pod annotations).

    `use_types`/`no_use_types` match case-insensitive substrings of the device
    type; `use_uuids`/`no_use_uuids` match exactly; `modes` restricts the device
    mode (hami-core, mig, mps) by substring of the requested value.
    """

    use_types: tuple[str, ...] = ()
    no_use_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    no_use_uuids: tuple[str, ...] = ()
    numa_bind: bool = False
    modes: str | None = None


NO_FILTERS = DeviceFilters()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """HAMi's ContainerDeviceRequest: `count` distinct devices of `vendor`, each with
    `memory_mib` MiB (or `memory_percent` % of the card) and `cores` percent."""

    vendor: str
    count: int
    memory_mib: int = 0
    memory_percent: int = MEMORY_PERCENT_UNSET
    cores: int = 0
    filters: DeviceFilters = NO_FILTERS
    pod_facts: tuple[tuple[str, str], ...] = ()
    """Pod annotations a vendor's own Fit or score reads, as (key, value) pairs of the
    keys present (Metax sGPU's app class, qos policy, topology-aware); part of
    the request's shape, so refusals are remembered per value."""

    def memory_on(self, device_memory_mib: int) -> int:
        """MiB this request takes on a device of the given size (Fit's arithmetic)."""
        memory = self.memory_mib if self.memory_mib > 0 else 0
        if self.memory_percent != MEMORY_PERCENT_UNSET and self.memory_mib == 0:
            memory = device_memory_mib * self.memory_percent // 100
        return memory


ContainerRequest = tuple[DeviceRequest, ...]
"""One container's requests, at most one per vendor."""


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """`hami.io/device-scoring-weights`: how much slots, cores, memory count.

    HAMi reads whole, non-negative numbers; the fields stay typed as floats so
    callers that build weights directly keep working.
    """

    slot: float = 1.0
    core: float = 1.0
    memory: float = 1.0


DEFAULT_WEIGHTS = ScoringWeights()
SCORING_WEIGHT_KEYS = ("slot", "core", "memory")
_GO_INT64 = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def parse_scoring_weights(value: str | None) -> ScoringWeights:
    """Parse the annotation as HAMi's ParseDeviceScoringWeights does.

    Absent (None) means `slot=1,core=1,memory=1`. Otherwise all three keys are
    required, each once, as `key=integer` with spaces allowed around both;
    every refusal carries HAMi's own message, because that message is what
    fails the pod's scheduling in HAMi and what users search for.
    """
    if value is None:
        return DEFAULT_WEIGHTS
    parts = value.split(",")
    if len(parts) != len(SCORING_WEIGHT_KEYS):
        _refuse_weights(value, "expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    for part in parts:
        key, sep, number = part.strip().partition("=")
        if not sep:
            _refuse_weights(value, "expected key=value entries")
        key, number = key.strip(), number.strip()
        if key in weights:
            _refuse_weights(value, f"duplicate {_go_quote(key)} weight")
        if not _GO_INT64.fullmatch(number) or not _INT64[0] <= int(number) <= _INT64[1]:
            _refuse_weights(value, f"{_go_quote(key)} weight must be an integer")
        weight = int(number)
        if weight < 0:
            _refuse_weights(value, f"{_go_quote(key)} weight must not be negative")
        if key not in SCORING_WEIGHT_KEYS:
            _refuse_weights(value, f"unknown weight {_go_quote(key)}")
        weights[key] = weight
    if not any(weights.values()):
        _refuse_weights(value, "at least one weight must be positive")
    return ScoringWeights(**weights)


def _refuse_weights(value: str, why: str) -> NoReturn:
    raise InvalidParameterError(
        f"metadata.annotations[{DEVICE_SCORING_WEIGHTS}]",
        f"invalid {DEVICE_SCORING_WEIGHTS} annotation {_go_quote(value)}: {why}",
    )


def _go_quote(text: str) -> str:
    """Go's %q for the text people put in annotations (printable, quotes escaped)."""
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Everything the engine needs about one workload.

    Init containers come first, as in HAMi's PodDeviceRequests; each container
    holds one request per vendor (possibly none).
    """

    namespace: str
    name: str
    containers: tuple[ContainerRequest, ...]
    init_containers: tuple[ContainerRequest, ...] = ()
    gpu_policy: str | None = None
    node_policy: str | None = None
    weights: ScoringWeights = DEFAULT_WEIGHTS
    dropped: tuple[str, ...] = ()
    """Requests HAMi ignores instead of failing the pod (e.g. a `gpumem` that is not
    a whole MiB count in int32 range), each as `field: why`, so `explain` and
    the extender can tell the user why a container got no device."""

    @property
    def all_containers(self) -> tuple[ContainerRequest, ...]:
        return self.init_containers + self.containers

    def has_devices(self) -> bool:
        return any(request.count > 0 for ctr in self.all_containers for request in ctr)
