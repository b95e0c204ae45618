"""What the host must have for a claim's CDI spec to apply: the device nodes
it lists and the libvgpu files it mounts.

A container runtime stats every device node of a spec (`failed to stat CDI
host device`) and every bind-mount source when it creates the container, so
a missing one breaks each container of the claim at start, far from the
cause. Prepare (DRA) and Allocate (device plugin) look first: prepare lists
only the nodes the host has (NVIDIA's, or AMD's `/dev/kfd` and `/dev/dri/*`),
and both fail with the file's name when a libvgpu file is absent or the
preload list does not name the library's container path.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from cdi.spec import NVIDIA_CONTROL_DEVICE_NODES, nvidia_device_node
from dra_driver.errors import DriverError
from kubeletplugin.gpus import GpuInfo
from libvgpu.settings import LibvgpuPaths

CONTAINER_DEV_DIR = "/dev"
AMD_CONTROL_DEVICE_NODES = ("/dev/kfd",)
"""The ROCm compute driver's node: every HIP/HSA process opens it, whichever card it uses."""
INSTALL_HINT = "run `dra-driver install-libvgpu` on this node (the plugin's init container does)"


class HostSetupError(DriverError):
    """The node lacks a file prepare needs; retrying helps only once it is installed."""


def _is_device_node(path: Path) -> bool:
    """What a runtime accepts as a device node (it uses lstat: no symlinks)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)


def host_device_nodes(dev_dir: Path, gpu_minors: Iterable[int]) -> dict[str, str]:
    """Container path -> host path of the NVIDIA nodes the host has.

    Control nodes are optional (`/dev/nvidia-uvm*` appear only once the UVM
    module is loaded); a GPU's own node is required, since without it the
    container cannot use the GPU it was given.
    """
    nodes = {}
    for path in NVIDIA_CONTROL_DEVICE_NODES:
        host = dev_dir / Path(path).relative_to(CONTAINER_DEV_DIR)
        if _is_device_node(host):
            nodes[path] = str(host)
    for minor in sorted(set(gpu_minors)):
        path = nvidia_device_node(minor)
        host = dev_dir / Path(path).relative_to(CONTAINER_DEV_DIR)
        if not _is_device_node(host):
            raise HostSetupError(
                f"device node {host} of GPU minor {minor} is missing on this node; "
                "is the NVIDIA driver loaded?"
            )
        nodes[path] = str(host)
    return nodes


def amd_device_nodes(gpu: GpuInfo) -> tuple[str, ...]:
    """Container paths of an AMD card's own nodes: `/dev/dri/card<minor>` and, when
    discovery found it, `/dev/dri/renderD<N>` (the one ROCm computes through)."""
    nodes = [f"/dev/dri/card{gpu.minor}"]
    if gpu.drm_render is not None:
        nodes.append(f"/dev/dri/renderD{gpu.drm_render}")
    return tuple(nodes)


def host_amd_device_nodes(dev_dir: Path, gpus: Iterable[GpuInfo]) -> dict[str, str]:
    """Container path -> host path of the AMD nodes the host has, as the ROCm device
    plugin hands a container: `/dev/kfd` and each card's render node are required (no
    ROCm process runs without them), its `card<N>` node is listed when present."""
    nodes = {}
    for path in AMD_CONTROL_DEVICE_NODES:
        host = dev_dir / Path(path).relative_to(CONTAINER_DEV_DIR)
        if not _is_device_node(host):
            raise HostSetupError(
                f"device node {host} (ROCm's compute driver) is missing on this node; "
                "is the amdgpu driver loaded?"
            )
        nodes[path] = str(host)
    for gpu in sorted(gpus, key=lambda g: g.index):
        if gpu.drm_render is None:
            raise HostSetupError(
                f"AMD GPU {gpu.uuid} ({gpu.pci_bus_id}) has no known render node: neither "
                "amdsmi_get_gpu_enumeration_info nor its sysfs drm/ directory named one"
            )
        card, render = amd_device_nodes(gpu)
        for path, required in ((card, False), (render, True)):
            host = dev_dir / Path(path).relative_to(CONTAINER_DEV_DIR)
            if _is_device_node(host):
                nodes[path] = str(host)
            elif required:
                raise HostSetupError(
                    f"device node {host} of AMD GPU {gpu.uuid} is missing on this node; "
                    "is the amdgpu driver loaded?"
                )
    return nodes


def check_libvgpu_files(paths: LibvgpuPaths, *, with_preload: bool) -> None:
    """Refuse to prepare when a libvgpu mount source is absent on the host, or when
    the preload list would not load the library where the container sees it.

    Both node plugins call this before handing a container its mounts: a missing
    source becomes an empty directory on containerd, and a preload list naming
    another path loads nothing; either way no limit holds and nothing says so.
    """
    wanted = [("libvgpu library", paths.host_library_path, False)]
    if with_preload:
        wanted.append(("libvgpu preload list", paths.host_preload_path, False))
    wanted.append(("libvgpu lock directory", paths.lock_dir, True))
    for what, path, directory in wanted:
        present = os.path.isdir(path) if directory else os.path.isfile(path)
        if not present:
            raise HostSetupError(f"{what} {path} is missing on this node; {INSTALL_HINT}")
    if with_preload:
        _check_preload_names_library(paths)


def preload_entries(text: str) -> list[str]:
    """The libraries an `ld.so.preload` lists, read as glibc's loader reads it:
    `#` starts a comment to the end of the line, names are separated by spaces,
    tabs, newlines or colons (rtld.c)."""
    entries = []
    for line in text.split("\n"):
        content = line.split("#", 1)[0]
        entries.extend(name for name in re.split(r"[: \t]+", content) if name)
    return entries


def _check_preload_names_library(paths: LibvgpuPaths) -> None:
    path = paths.host_preload_path
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            entries = preload_entries(handle.read())
    except OSError as error:
        raise HostSetupError(
            f"libvgpu preload list {path} cannot be read: {error.strerror}; {INSTALL_HINT}"
        ) from error
    if paths.container_library_path not in entries:
        listed = ", ".join(entries) or "nothing"
        raise HostSetupError(
            f"libvgpu preload list {path} names {listed}, not "
            f"{paths.container_library_path} where containers see libvgpu.so, so the "
            f"library would never be loaded and no limit would hold; {INSTALL_HINT} "
            "with its default --container-library-path"
        )
