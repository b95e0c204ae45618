"""The node flags of both plugins as settings: the container sees libvgpu.so at one
fixed path whatever --vgpu-dir is (the preload list names that path), and the device
plugin takes the lock dir as the kubelet plugin does."""

from __future__ import annotations

import pytest

from dra_driver.cli import build_parser
from kubeletplugin.deviceplugin.entry import settings_from_args as device_plugin_settings
from kubeletplugin.service import settings_from_args as kubelet_plugin_settings

NODE_FLAGS = ["--node-name", "n1", "--vgpu-dir", "/opt/hami/vgpu"]


def test_a_non_default_vgpu_dir_moves_host_files_not_the_container_library() -> None:
    parser = build_parser()
    legacy = device_plugin_settings(parser.parse_args(["device-plugin", *NODE_FLAGS])).libvgpu
    dra = kubelet_plugin_settings(parser.parse_args(["kubelet-plugin", *NODE_FLAGS])).libvgpu

    for paths in (legacy, dra):
        assert paths.host_library_path == "/opt/hami/vgpu/libvgpu.so"
        assert paths.host_preload_path == "/opt/hami/vgpu/ld.so.preload"
        assert paths.container_library_path == "/usr/local/vgpu/libvgpu.so"


def test_the_device_plugin_takes_the_lock_dir_by_flag() -> None:
    args = build_parser().parse_args(["device-plugin", *NODE_FLAGS, "--lock-dir", "/run/lk"])
    assert device_plugin_settings(args).libvgpu.lock_dir == "/run/lk"


def test_the_device_plugin_takes_the_lock_dir_from_its_env_var(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VGPU_LOCK_DIR", "/var/run/vgpulock")
    args = build_parser().parse_args(["device-plugin", *NODE_FLAGS])
    assert device_plugin_settings(args).libvgpu.lock_dir == "/var/run/vgpulock"


def test_the_device_plugin_reads_hami_s_device_config_by_flag_or_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The MIG profile allowlist lives in HAMi's device-config.yaml (as the scheduler's
    --device-config-file reads it); without the flag the plugin reads none."""
    parser = build_parser()
    assert (
        device_plugin_settings(parser.parse_args(["device-plugin", *NODE_FLAGS])).device_config
        is None
    )
    args = parser.parse_args(["device-plugin", *NODE_FLAGS, "--device-config-file", "/c/d.yaml"])
    assert str(device_plugin_settings(args).device_config) == "/c/d.yaml"
    monkeypatch.setenv("DEVICE_CONFIG_FILE", "/config/device-config.yaml")
    args = parser.parse_args(["device-plugin", *NODE_FLAGS])
    assert str(device_plugin_settings(args).device_config) == "/config/device-config.yaml"
