"""`dra-driver device-plugin` as a process: flags and env reach the plugin, it registers
with the kubelet stand-in, writes the register annotation, and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from deviceplugin_rig import RESOURCE, bounded, node_rig

from api.hami_annotations import NODE_NVIDIA_REGISTER, decode_node_devices


async def test_the_command_registers_annotates_and_stops_on_sigterm() -> None:
    async with node_rig() as rig:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "dra_driver.cli",
            "device-plugin",
            "--node-name",
            rig.name,
            "--device-plugin-dir",
            str(rig.settings.plugin_dir),
            "--mock-gpus",
            str(rig.mock_gpus),
            "--vgpu-dir",
            str(rig.root / "vgpu"),
            "--kubeconfig",
            str(rig.root.parent / "kubeconfig"),
            env={**os.environ, "DEVICE_SPLIT_COUNT": "3"},
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            devices = await bounded(rig.kubelet.wait_update(RESOURCE))
            node = await bounded(
                rig.wait_node(
                    lambda n: NODE_NVIDIA_REGISTER in (n["metadata"].get("annotations") or {})
                )
            )
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = await bounded(process.communicate())

    assert process.returncode == 0, stderr.decode()
    assert len(devices) == 6
    registered = decode_node_devices(node["metadata"]["annotations"][NODE_NVIDIA_REGISTER])
    assert [d.count for d in registered] == [3, 3]
    assert b"registered with kubelet" in stderr
