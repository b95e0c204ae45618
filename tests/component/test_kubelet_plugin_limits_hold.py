"""A tenant trying to lift its share's limits in DRA mode, over the plugin's real socket:
through its own env (the CDI spec pins every HAMi-core knob, and CDI env replaces the
container's) and through the claim's opaque config (only a class may opt out, or let
its claims do so). Every opt-out that takes effect is told on the claim, with who
allowed it, so `dra-driver status` and the user can see the share runs unenforced."""

from __future__ import annotations

from dataclasses import replace

from cdi_applier import apply_devices, container_env
from prometheus_client import CollectorRegistry
from test_kubelet_plugin import DRIVER, Node, node, result

from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin
from simulator.standins.kubelet_dra import ClaimRef

__all__ = ["node"]

PARAMS = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}
OPT_OUT = {**PARAMS, "disableControl": True, "coreLimitPolicy": "disable"}
ORDINAL_KNOBS = [f"CUDA_DEVICE_{k}_LIMIT_{i}" for i in range(16) for k in ("MEMORY", "SM")]
LIFTING_ENV = {
    "CUDA_DISABLE_CONTROL": "true",
    "CUDA_DEVICE_MEMORY_LIMIT": "81920m",
    "CUDA_DEVICE_SM_LIMIT": "100",
    **{name: "81920m" if "MEMORY" in name else "100" for name in ORDINAL_KNOBS},
    "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/my-own.cache",
    "CUDA_REDIRECT": "/tmp/passthrough.so",
    "GPU_CORE_UTILIZATION_POLICY": "disable",
    "CUDA_TASK_PRIORITY": "0",
    "APP_SETTING": "kept",
}


CONFIG = "status.allocation.devices.config[{}].opaque.parameters"


def opaque(source: str, parameters: dict) -> dict:
    entry = {"source": source, "opaque": {"driver": DRIVER, "parameters": parameters}}
    if source == "FromClass":
        entry["requests"] = ["gpu"]
    return entry


async def prepared_ids(node: Node, claim: ClaimRef) -> list[str]:
    entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
    assert entry.error == ""
    return list(entry.devices[0].cdi_device_ids)


async def claim_events(node: Node, plugin: KubeletPlugin, reason: str) -> list[dict]:
    await plugin.events.wait_idle()
    events = await node.client.list("/api/v1/namespaces/default/events")
    return [e for e in events["items"] if e["reason"] == reason]


async def opt_out_warnings(node: Node, plugin: KubeletPlugin) -> list[dict]:
    return await claim_events(node, plugin, "VGPUConfigOptOutIgnored")


async def enforcement_off(node: Node, plugin: KubeletPlugin) -> list[dict]:
    return await claim_events(node, plugin, "VGPUEnforcementDisabled")


async def test_a_pod_env_setting_each_knob_ends_with_the_pinned_value(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("pinned", [result("gpu-0", "2Gi", "30")])
        ids = await prepared_ids(node, claim)
        env = container_env(LIFTING_ENV, ids, [node.cdi_dir])
        cache = apply_devices(ids, [node.cdi_dir]).env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    assert cache != LIFTING_ENV["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    assert {name: env[name] for name in LIFTING_ENV} == {
        "CUDA_DISABLE_CONTROL": "false",
        "CUDA_DEVICE_MEMORY_LIMIT": "0",
        "CUDA_DEVICE_SM_LIMIT": "0",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
        "CUDA_DEVICE_SM_LIMIT_0": "30",
        **dict.fromkeys(ORDINAL_KNOBS[2:], "0"),
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": cache,
        "CUDA_REDIRECT": "/usr/local/vgpu/libvgpu.so",
        "GPU_CORE_UTILIZATION_POLICY": "default",
        "CUDA_TASK_PRIORITY": "1",
        "APP_SETTING": "kept",
    }


async def test_a_claims_opt_out_is_ignored_with_a_warning_and_the_limits_stay(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("tamper", [result("gpu-0", "1Gi")], [opaque("FromClaim", OPT_OUT)])
        applied = apply_devices(await prepared_ids(node, claim), [node.cdi_dir])
        (warning,) = await opt_out_warnings(node, plugin)
        assert await enforcement_off(node, plugin) == []
    assert "/etc/ld.so.preload" in applied.mounts
    assert applied.env["CUDA_DISABLE_CONTROL"] == "false"
    assert applied.env["GPU_CORE_UTILIZATION_POLICY"] == "default"
    assert warning["type"] == "Warning"
    assert warning["involvedObject"]["name"] == "tamper"
    path = "status.allocation.devices.config[0].opaque.parameters"
    assert f"{path}.disableControl, {path}.coreLimitPolicy ignored" in warning["message"]
    assert "the limits stay" in warning["message"]


async def test_a_class_opt_out_is_honoured_and_told_on_the_claim(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("admin", [result("gpu-0", "1Gi")], [opaque("FromClass", OPT_OUT)])
        applied = apply_devices(await prepared_ids(node, claim), [node.cdi_dir])
        assert await opt_out_warnings(node, plugin) == []
        (note,) = await enforcement_off(node, plugin)
    assert "/etc/ld.so.preload" not in applied.mounts
    assert applied.env["CUDA_DISABLE_CONTROL"] == "true"
    assert applied.env["GPU_CORE_UTILIZATION_POLICY"] == "disable"
    assert note["type"] == "Normal"
    assert note["involvedObject"]["name"] == "admin"
    assert note["involvedObject"]["uid"] == claim.uid
    assert note["message"] == (
        f"claim default/admin ({claim.uid}): HAMi-core enforcement disabled by "
        f"{CONFIG.format(0)}.disableControl (allowed by DeviceClass config), "
        f"{CONFIG.format(0)}.coreLimitPolicy (allowed by DeviceClass config): "
        "libvgpu.so is not preloaded, so no memory or SM limit holds"
    )


async def test_a_class_that_allows_it_lets_its_claim_opt_out(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim(
            "delegated",
            [result("gpu-0", "1Gi")],
            [
                opaque("FromClass", {**PARAMS, "allowClaimOptOut": True}),
                opaque("FromClaim", {**PARAMS, "coreLimitPolicy": "disable"}),
            ],
        )
        applied = apply_devices(await prepared_ids(node, claim), [node.cdi_dir])
        assert await opt_out_warnings(node, plugin) == []
        (note,) = await enforcement_off(node, plugin)
    assert "/etc/ld.so.preload" in applied.mounts
    assert applied.env["CUDA_DISABLE_CONTROL"] == "false"
    assert applied.env["GPU_CORE_UTILIZATION_POLICY"] == "disable"
    assert applied.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"
    assert note["type"] == "Normal"
    assert (
        f"{CONFIG.format(1)}.coreLimitPolicy (allowed by class allowClaimOptOut): "
        "SM throttling is off; the memory limits hold"
    ) in note["message"]


async def test_a_claim_setting_the_class_switch_itself_is_not_prepared(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim(
            "self-allowed",
            [result("gpu-0", "1Gi")],
            [opaque("FromClaim", {**OPT_OUT, "allowClaimOptOut": True})],
        )
        entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
        assert await enforcement_off(node, plugin) == []
    assert (
        f"{CONFIG.format(0)}.allowClaimOptOut: only a DeviceClass's config may set it, "
        "not a claim's"
    ) in entry.error
    assert list(node.cdi_dir.glob("*.json")) == []


async def test_the_driver_flag_lets_a_claim_opt_out(node: Node):
    settings = replace(node.settings, allow_claim_opt_out=True)
    plugin = KubeletPlugin(
        settings, node.client, MockBackend(settings.mock_gpus), CollectorRegistry()
    )
    async with plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim(
            "allowed", [result("gpu-0", "1Gi")], [opaque("FromClaim", OPT_OUT)]
        )
        applied = apply_devices(await prepared_ids(node, claim), [node.cdi_dir])
        assert await opt_out_warnings(node, plugin) == []
        (note,) = await enforcement_off(node, plugin)
    assert "/etc/ld.so.preload" not in applied.mounts
    assert applied.env["CUDA_DISABLE_CONTROL"] == "true"
    assert (
        f"{CONFIG.format(0)}.disableControl (allowed by --allow-claim-opt-out)" in (note["message"])
    )
