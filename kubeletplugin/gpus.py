"""What the node's GPUs are: the discovery interface and its backends.

NVML (through an injected pynvml-compatible module, so tests can hand in a
fake module), AMD SMI (`kubeletplugin.amdsmi_backend`, the same way) and
`mock`: cards of any family in `dra_driver.objects.dra_vendors` described in a
small YAML/JSON file with a `vendor` field, for CPU-only nodes, tests and the
simulator, so every vendor runs without its hardware.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.quantity import QuantityError, to_bytes_ceil
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_vendors import NVIDIA, dra_vendor
from dra_driver.objects.mig_profiles import CARDS, mig_card
from kubeletplugin.gpu_topology import MAX_NVLINKS, GpuLink, P2PLevel
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.mig_nvml import create_mig_instance, destroy_mig_instance, read_mig
from kubeletplugin.mig_state import MigError, MigInstance, MigNotSupportedError, MigState
from kubeletplugin.nvml_topology import NvmlGpu, read_links
from libvgpu.host_gpus import nvml_text


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU as discovered on this node."""

    uuid: str
    index: int
    minor: int
    product_name: str
    memory_bytes: int
    numa_node: int = 0
    pci_bus_id: str = ""
    driver_version: str = ""
    cuda_driver_version: str = ""
    compute_capability: str = ""
    healthy: bool = True
    unhealthy_reason: str = ""
    links: tuple[GpuLink, ...] = ()
    """Its PCIe path and NVLinks to the node's other GPUs; empty when not read."""
    vendor: str = NVIDIA.id
    """Its family's id in `dra_driver.objects.dra_vendors` (`nvidia`, `mlu`, `ascend`, ...)."""
    drm_render: int | None = None
    """AMD: the number of its `/dev/dri/renderD<N>` node (`minor` is its `card<N>`); None
    for other families, or when amdsmi and sysfs could not tell."""
    mig: MigState = field(default_factory=MigState)
    """NVIDIA: its MIG mode, profiles and MIG devices; the default is a card without MIG."""


class GpuBackend(Protocol):
    """Discovery behind an interface: the rest of the plugin never sees NVML."""

    @property
    def has_device_nodes(self) -> bool:
        """Whether the GPUs have device nodes the CDI spec lists for a container: NVIDIA's
        `/dev/nvidia*` and AMD's `/dev/kfd` and `/dev/dri/*`, so not mock cards; other
        vendors' device nodes are their runtimes' to add."""
        ...

    def discover(self) -> Sequence[GpuInfo]: ...


@runtime_checkable
class MigInstanceManager(Protocol):
    """A backend that creates and destroys MIG instances (mock and NVML): what prepare
    needs for a partition. Calls block; errors are `MigError`s naming the card, the
    profile, the placement and what is free."""

    def create_mig_instance(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        """A GPU instance of `profile` at memory slice `start` and one compute instance
        spanning all of it; nothing is left behind when either create is refused."""
        ...

    def destroy_mig_instance(
        self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None
    ) -> None:
        """The compute instance (when given and present), then the GPU instance;
        `MigNotFoundError` when the GPU instance is gone."""
        ...


NVIDIA_MOCK_DRIVER = "550.54.15"


class MockLink(BaseModel):
    """One GPU's connection to another, as NVML would report it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    peer: str = Field(min_length=1, description="The other GPU's UUID.")
    p2p: P2PLevel | None = Field(
        None,
        description=(
            "Closest common PCIe ancestor, as NVML's topology level: one board (scores 60), "
            "one switch (50), several switches (40), a host bridge (30), one NUMA node "
            "(20), across CPUs (10); unset = unknown (0)."
        ),
    )
    nvlinks: int = Field(
        0, ge=0, le=MAX_NVLINKS, description="Active NVLinks to the peer (100 each)."
    )


class MockMigInstance(BaseModel):
    """A MIG device present when the mock starts: a GPU instance with one full compute
    instance, as an administrator's static layout leaves it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    profile: str = Field(min_length=1, description="Profile name, e.g. `3g.40gb`.")
    start: int | None = Field(
        None, ge=0, description="First memory slice; unset = the first free placement."
    )


class MockMig(BaseModel):
    """The card's MIG side. The card's product and memory pick NVIDIA's profile table
    (A100 40/80GB, H100 80GB, H200 141GB)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    mode: Literal["enabled", "disabled"] = Field("enabled", description="Current MIG mode.")
    pending: Literal["enabled", "disabled"] | None = Field(
        None, description="Mode after the next GPU reset; unset = the current mode."
    )
    instances: list[MockMigInstance] = Field(
        default_factory=list,
        description="MIG devices present at start (each a GPU instance with one full compute "
        "instance); only in MIG mode.",
    )


class MockGpu(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    uuid: str = Field(min_length=1, description="GPU UUID, e.g. `GPU-...`.")
    index: int = Field(ge=0, description="NVML index.")
    minor: int | None = Field(None, ge=0, description="Device minor; unset = the index.")
    product_name: str | None = Field(
        None, alias="productName", description="Unset = the vendor's default product."
    )
    memory: int | str | None = Field(
        None, description="Bytes, or a Kubernetes quantity; unset = the vendor's default card."
    )
    numa: int = Field(0, ge=0, description="NUMA node.")
    pci_bus_id: str = Field("", alias="pciBusID")
    healthy: bool = Field(True, description="False publishes the GPU with a NoSchedule taint.")
    unhealthy_reason: str = Field("", alias="unhealthyReason", description="The taint's value.")
    memory_used: int = Field(
        0, ge=0, alias="memoryUsed", description="Bytes in use, for the monitor's host series."
    )
    utilization: int = Field(
        0, ge=0, le=100, description="Percent busy, for the monitor's host series."
    )
    links: list[MockLink] = Field(
        default_factory=list,
        description=(
            "Links to the other GPUs (PCIe path, NVLink count), as the device plugin reads "
            "them from NVML for `hami.io/node-nvidia-score`; give both directions."
        ),
    )
    mig: MockMig | None = Field(
        None, description="MIG mode and instances; unset = a card without MIG."
    )


class MockGpuFile(BaseModel):
    """A node's mock GPUs: what NVML would report, for machines without GPUs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    vendor: str = Field(
        NVIDIA.id,
        description="The cards' family: nvidia, mlu, dcu, ascend, iluvatar, metax, mthreads, "
        "gcu, xpu, neuron, amd, vastai or biren (dra_driver/objects/dra_vendors.py).",
    )
    driver_version: str | None = Field(
        None, alias="driverVersion", description="Unset: 550.54.15 for NVIDIA, none otherwise."
    )
    cuda_driver_version: str = Field("12.4", alias="cudaDriverVersion")
    compute_capability: str = Field("8.0", alias="cudaComputeCapability")
    gpus: list[MockGpu] = Field(default_factory=list, description="One entry per GPU.")


@dataclass(slots=True)
class MockBackend:
    """GPUs from a config file (re-read on every discovery, so edits show up).

    Mock GPUs have no device nodes: their CDI specs must apply on a machine
    without GPUs (kind), where a runtime refuses a spec naming `/dev/nvidia*`.
    """

    path: Path
    mig_devices: dict[str, MockMigDevice] = field(default_factory=dict)
    """Each MIG-mode card's instances by its uuid, kept across discoveries so instances
    created since (prepare) stay; re-seeded when the file's `mig` for the card changes."""
    _mig_seeds: dict[str, MockMig] = field(default_factory=dict)
    _mig_lock: threading.Lock = field(default_factory=threading.Lock)
    """Prepare creates and destroys in worker threads, discovery re-seeds: one at a time."""
    has_device_nodes = False

    def create_mig_instance(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        with self._mig_lock:
            device = self._mig_device(gpu_uuid)
            gpu_instance = device.create_gpu_instance(profile, start)
            try:
                compute_instance = device.create_compute_instance(gpu_instance)
            except MigError:
                device.destroy_gpu_instance(gpu_instance)
                raise
            return next(
                i
                for i in device.state().instances
                if (i.gpu_instance_id, i.compute_instance_id) == (gpu_instance, compute_instance)
            )

    def destroy_mig_instance(
        self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None
    ) -> None:
        with self._mig_lock:
            device = self._mig_device(gpu_uuid)
            held = next((gi for gi in device.gpu_instances() if gi.id == gpu_instance_id), None)
            if held is not None and compute_instance_id in dict(held.compute):
                device.destroy_compute_instance(gpu_instance_id, compute_instance_id)
            device.destroy_gpu_instance(gpu_instance_id)

    def _mig_device(self, gpu_uuid: str) -> MockMigDevice:
        device = self.mig_devices.get(gpu_uuid)
        if device is None:
            raise MigNotSupportedError(gpu_uuid, "not a MIG-capable card of this node")
        return device

    def discover(self) -> Sequence[GpuInfo]:
        try:
            document = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
            spec = MockGpuFile.model_validate(document)
        except OSError as error:
            raise InvalidParameterError(str(self.path), f"cannot read: {error.strerror}") from None
        except (yaml.YAMLError, ValidationError) as error:
            raise InvalidParameterError(str(self.path), f"not a mock GPU file: {error}") from None
        vendor = dra_vendor(spec.vendor, f"{self.path}: vendor")
        cuda = vendor is NVIDIA
        gpus = []
        for position, gpu in enumerate(spec.gpus):
            try:
                memory = (
                    vendor.memory_bytes if gpu.memory is None else to_bytes_ceil(str(gpu.memory))
                )
            except QuantityError as error:
                raise InvalidParameterError(
                    f"{self.path}: gpus[{position}].memory", error.reason
                ) from None
            gpus.append(
                GpuInfo(
                    uuid=gpu.uuid,
                    index=gpu.index,
                    minor=gpu.index if gpu.minor is None else gpu.minor,
                    product_name=gpu.product_name or vendor.product,
                    memory_bytes=memory,
                    numa_node=gpu.numa,
                    pci_bus_id=gpu.pci_bus_id,
                    driver_version=(
                        spec.driver_version
                        if spec.driver_version is not None
                        else (NVIDIA_MOCK_DRIVER if cuda else "")
                    ),
                    cuda_driver_version=spec.cuda_driver_version if cuda else "",
                    compute_capability=spec.compute_capability if cuda else "",
                    healthy=gpu.healthy,
                    unhealthy_reason=gpu.unhealthy_reason,
                    links=tuple(GpuLink(ln.peer, ln.p2p, ln.nvlinks) for ln in gpu.links),
                    vendor=vendor.id,
                    mig=self._mig(f"{self.path}: gpus[{position}].mig", gpu, memory, cuda),
                )
            )
        return gpus

    def _mig(self, where: str, gpu: MockGpu, memory: int, cuda: bool) -> MigState:
        if gpu.mig is None:
            self.mig_devices.pop(gpu.uuid, None)
            return MigState()
        if not cuda:
            raise InvalidParameterError(where, "MIG is for NVIDIA cards only")
        with self._mig_lock:
            if self._mig_seeds.get(gpu.uuid) != gpu.mig or gpu.uuid not in self.mig_devices:
                self.mig_devices[gpu.uuid] = self._seed(where, gpu, gpu.mig, memory)
                self._mig_seeds[gpu.uuid] = gpu.mig
            return self.mig_devices[gpu.uuid].state()

    @staticmethod
    def _seed(where: str, gpu: MockGpu, mig: MockMig, memory: int) -> MockMigDevice:
        """A card's device as the file declares it: instances first (made while in MIG
        mode), then the pending mode, which may refuse new ones until a reset."""
        product = gpu.product_name or NVIDIA.product
        card = mig_card(product, memory)
        if card is None:
            models = ", ".join(c.model for c in CARDS)
            raise InvalidParameterError(
                where, f"{product} ({memory / (1 << 30):g} GiB) has no MIG table; known: {models}"
            )
        enabled = mig.mode == "enabled"
        device = MockMigDevice(gpu.uuid, card, enabled=enabled, pending_enabled=enabled)
        for number, instance in enumerate(mig.instances):
            try:
                gi = device.create_gpu_instance(instance.profile, instance.start)
                device.create_compute_instance(gi)
            except MigError as error:
                raise InvalidParameterError(f"{where}.instances[{number}]", str(error)) from None
        device.pending_enabled = enabled if mig.pending is None else mig.pending == "enabled"
        return device


@dataclass(slots=True)
class NvmlBackend:
    """GPUs through NVML. `nvml` is the pynvml module (or a fake with its API);
    `read_numa` reads a PCI device's NUMA node when NVML cannot tell."""

    nvml: Any
    read_numa: Callable[[str], int] = field(default=lambda bus_id: 0)
    unhealthy: dict[str, str] = field(default_factory=dict)
    read_topology: bool = False
    """Also read the GPUs' PCIe paths and NVLinks (n² NVML calls): only the device
    plugin publishes them (`hami.io/node-nvidia-score`)."""
    has_device_nodes = True

    def create_mig_instance(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        self.nvml.nvmlInit()
        try:
            return create_mig_instance(self.nvml, gpu_uuid, profile, start)
        finally:
            self.nvml.nvmlShutdown()

    def destroy_mig_instance(
        self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None
    ) -> None:
        self.nvml.nvmlInit()
        try:
            destroy_mig_instance(self.nvml, gpu_uuid, gpu_instance_id, compute_instance_id)
        finally:
            self.nvml.nvmlShutdown()

    def discover(self) -> Sequence[GpuInfo]:
        nvml = self.nvml
        nvml.nvmlInit()
        try:
            driver = nvml_text(nvml.nvmlSystemGetDriverVersion())
            cuda = nvml.nvmlSystemGetCudaDriverVersion()
            cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
            gpus = []
            handles = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
                bus_id = nvml_text(nvml.nvmlDeviceGetPciInfo(handle).busId)
                handles.append(NvmlGpu(uuid, handle, bus_id))
                major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                product = nvml_text(nvml.nvmlDeviceGetName(handle))
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
                gpus.append(
                    GpuInfo(
                        uuid=uuid,
                        index=index,
                        minor=nvml.nvmlDeviceGetMinorNumber(handle),
                        product_name=product,
                        memory_bytes=memory,
                        numa_node=self._numa(handle, bus_id),
                        pci_bus_id=bus_id,
                        driver_version=driver,
                        cuda_driver_version=cuda_version,
                        compute_capability=f"{major}.{minor_cc}",
                        healthy=uuid not in self.unhealthy,
                        unhealthy_reason=self.unhealthy.get(uuid, ""),
                        mig=read_mig(nvml, handle, mig_card(product, memory)),
                    )
                )
            if not self.read_topology:
                return gpus
            links = read_links(nvml, handles)
            return [replace(gpu, links=links[gpu.uuid]) for gpu in gpus]
        finally:
            nvml.nvmlShutdown()

    def _numa(self, handle: Any, bus_id: str) -> int:
        getter = getattr(self.nvml, "nvmlDeviceGetNumaNodeId", None)
        if getter is not None:
            try:
                node = int(getter(handle))
            except self.nvml.NVMLError:
                node = -1
            if node >= 0:
                return node
        return self.read_numa(bus_id)


def read_sysfs_numa(bus_id: str, root: Path = Path("/sys/bus/pci/devices")) -> int:
    """NUMA node of a PCI device from sysfs; -1 (no affinity) reads as 0."""
    name = bus_id.lower()
    if name.count(":") == 2 and len(name.split(":")[0]) == 8:
        name = name[4:]
    if "/" in name or name.startswith("."):
        return 0
    try:
        node = int((root / name / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return 0
    return max(node, 0)
