"""A kubelet plugin's settings on a mock node under a temporary root: the mock GPU file,
a boot id, a mount table in which nothing else mounts its cache dirs, and every path
the plugin writes kept under the root (unix socket paths must stay short, so callers
pass a short root such as `tempfile.mkdtemp(dir="/tmp")`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubeletplugin.plugin import PluginSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths

ROOT_MOUNT = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"


def mock_node_settings(root: Path, gpus_yaml: str, node: str, **overrides: Any) -> PluginSettings:
    """The settings, after writing the files they name; containers' mount tables are
    the files `root/none-*` (none unless a test writes one)."""
    (root / "gpus.yaml").write_text(gpus_yaml)
    (root / "boot_id").write_text("boot-1\n")
    (root / "mountinfo").write_text(ROOT_MOUNT)
    fields: dict[str, Any] = {
        "node_name": node,
        "registry_dir": root / "registry",
        "plugin_dir": root / "plugin",
        "cdi_dir": root / "cdi",
        "boot_id_file": root / "boot_id",
        "mock_gpus": root / "gpus.yaml",
        "config_file": root / "config" / "node.yaml",
        "libvgpu": LibvgpuPaths(
            host_dir=str(root / "vgpu"),
            cache_root=str(root / "vgpu"),
            lock_dir=str(root / "vgpulock"),
        ),
        "cache_dirs": CacheDirSettings(
            self_mountinfo=str(root / "mountinfo"), mountinfo_glob=str(root / "none-*")
        ),
    }
    return PluginSettings(**{**fields, **overrides})
