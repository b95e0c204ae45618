"""What a Fit works on and gives: a device's running usage (`Slot`) and one device
given to one container (`Grant`, HAMi's ContainerDevice).

Plain data below both the Fit (`fit.py`) and the vendor adapters whose hooks
take and return it (`vendors.py`), so neither has to import the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.engine.model import Device


@dataclass(frozen=True, slots=True)
class Grant:
    """One device given to one container: HAMi's ContainerDevice."""

    uuid: str
    vendor: str
    memory_mib: int
    cores: int
    index: int
    device_type: str = ""
    """The `Type` the pod annotation names; empty: the vendor (request Type). AMD's
    Fit names the card's registered type instead."""
    tag: str = ""
    """What later Fits of the device must know of the pod (kept in the device's
    `DeviceUsage.tags`); empty: nothing (every vendor but Metax sGPU)."""


ContainerGrants = tuple[Grant, ...]


class Slot:
    """A device and its running usage while a pod is being fitted."""

    __slots__ = ("cores", "device", "memory", "score", "tags", "used")

    def __init__(
        self, device: Device, used: int, memory: int, cores: int, tags: tuple[str, ...] = ()
    ) -> None:
        self.device = device
        self.used = used
        self.memory = memory
        self.cores = cores
        self.tags = tags
        """The tags of the shares committed on the device (`DeviceUsage.tags`); the pod
        being fitted adds none, as HAMi adds no PodInfo for it."""
        self.score = 0.0

    def copy(self) -> Slot:
        return Slot(self.device, self.used, self.memory, self.cores, self.tags)

    @property
    def holds_nothing(self) -> bool:
        """No share, memory, cores or tag is committed on the device."""
        return not (self.used or self.memory or self.cores or self.tags)
