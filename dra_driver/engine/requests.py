"""What a workload asks for, per container (or per claim request) and vendor."""

from __future__ import annotations

from dataclasses import dataclass

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
    """`hami.io/device-scoring-weights`: how much slots, cores, memory count."""

    slot: float = 1.0
    core: float = 1.0
    memory: float = 1.0


DEFAULT_WEIGHTS = ScoringWeights()


def parse_scoring_weights(value: str | None) -> ScoringWeights:
    """Parse `slot=1,core=2,memory=0.5`; missing keys keep their default of 1."""
    if value is None or not value.strip():
        return DEFAULT_WEIGHTS
    weights = {"slot": 1.0, "core": 1.0, "memory": 1.0}
    for item in value.split(","):
        key, sep, number = item.partition("=")
        key = key.strip()
        if not sep or key not in weights:
            raise InvalidParameterError(
                "hami.io/device-scoring-weights", f"expected slot=,core=,memory= but got {item!r}"
            )
        try:
            weight = float(number)
        except ValueError:
            raise InvalidParameterError(
                "hami.io/device-scoring-weights", f"{key} weight {number!r} is not a number"
            ) from None
        if weight < 0:
            raise InvalidParameterError(
                "hami.io/device-scoring-weights", f"{key} weight must not be negative"
            )
        weights[key] = weight
    return ScoringWeights(**weights)


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

    @property
    def all_containers(self) -> tuple[ContainerRequest, ...]:
        return self.init_containers + self.containers

    def has_devices(self) -> bool:
        return any(request.count > 0 for ctr in self.all_containers for request in ctr)
