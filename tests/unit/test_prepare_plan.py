"""Prepare planning: sizing from consumedCapacity or VGPUConfig, and the safety net."""

from __future__ import annotations

import pytest

from dra_driver.errors import InvalidParameterError
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.prepare_plan import (
    DeviceCapacity,
    HonouredOptOut,
    OptOutAuthority,
    overcommitted,
    plan_claim,
)
from libvgpu.container_edits import CorePolicy

GIB = 1 << 30
DRIVER = "vgpu.hami.io"
PARAMS = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}
DEVICES = {
    f"gpu-{i}": DeviceCapacity(
        GpuInfo(uuid=f"GPU-{i}", index=i, minor=i, product_name="A100", memory_bytes=80 * GIB),
        memory_bytes=80 * GIB,
        cores=100,
    )
    for i in range(2)
}


def result(device="gpu-0", request="gpu", driver=DRIVER, pool="node-a", **consumed):
    entry = {
        "request": request,
        "driver": driver,
        "pool": pool,
        "device": device,
        "shareID": "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d",
    }
    if consumed:
        entry["consumedCapacity"] = consumed
    return entry


def claim(results, config=()):
    return {
        "metadata": {"uid": "11111111-2222-3333-4444-555555555555", "name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": list(results), "config": list(config)}}},
    }


def config(source, parameters, requests=None, driver=DRIVER):
    entry = {"source": source, "opaque": {"driver": driver, "parameters": {**PARAMS, **parameters}}}
    if requests:
        entry["requests"] = requests
    return entry


def plan(document):
    return plan_claim(document, driver=DRIVER, pool="node-a", devices=DEVICES)


def test_consumed_capacity_sizes_each_grant():
    (grant,) = plan(claim([result(memory="10Gi", cores="30", shares="1")])).grants
    assert (grant.device, grant.gpu.uuid, grant.memory_limit_bytes, grant.core_limit) == (
        "gpu-0",
        "GPU-0",
        10 * GIB,
        30,
    )
    assert grant.share_id == "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"


def test_config_sizes_when_nothing_was_consumed_and_claim_overrides_class():
    document = claim(
        [result()],
        [
            config("FromClass", {"memory": "4Gi", "cores": 50, "coreLimitPolicy": "force"}),
            config("FromClaim", {"cores": 20, "priority": 0}),
        ],
    )
    planned = plan(document)
    (grant,) = planned.grants
    assert (grant.memory_limit_bytes, grant.core_limit) == (4 * GIB, 20)
    assert (planned.policy, planned.priority) == (CorePolicy.FORCE, 0)


def test_percentage_and_whole_card_defaults():
    half = plan(claim([result()], [config("FromClaim", {"memoryPercentage": 50})])).grants[0]
    whole = plan(claim([result()])).grants[0]
    assert (half.memory_limit_bytes, whole.memory_limit_bytes) == (40 * GIB, 80 * GIB)


def test_config_scoped_to_other_request_does_not_apply():
    document = claim([result(request="a")], [config("FromClaim", {"memory": "1Gi"}, ["b"])])
    assert plan(document).grants[0].memory_limit_bytes == 80 * GIB


def test_other_drivers_and_pools_are_not_ours():
    document = claim([result(driver="gpu.nvidia.com"), result(pool="node-b"), result("gpu-1")])
    assert [g.device for g in plan(document).grants] == ["gpu-1"]


def test_a_class_may_turn_enforcement_off():
    opt_out = {"disableControl": True, "coreLimitPolicy": "disable"}
    planned = plan(claim([result()], [config("FromClass", opt_out)]))
    assert (planned.disable_control, planned.policy) == (True, CorePolicy.DISABLE)
    assert planned.ignored_opt_outs == ()


def test_a_claims_opt_out_is_ignored_and_named_and_the_class_policy_stays():
    document = claim(
        [result()],
        [
            config("FromClass", {"coreLimitPolicy": "force"}),
            config(
                "FromClaim", {"disableControl": True, "coreLimitPolicy": "disable", "cores": 20}
            ),
        ],
    )
    planned = plan(document)
    assert (planned.disable_control, planned.policy) == (False, CorePolicy.FORCE)
    path = "status.allocation.devices.config[1].opaque.parameters"
    assert planned.ignored_opt_outs == (f"{path}.disableControl", f"{path}.coreLimitPolicy")
    assert "the administrator's decision" in planned.opt_out_message()
    assert "--allow-claim-opt-out" in planned.opt_out_message()


def test_a_claims_opt_out_is_honoured_when_the_driver_allows_it():
    document = claim([result()], [config("FromClaim", {"disableControl": True})])
    planned = plan_claim(
        document, driver=DRIVER, pool="node-a", devices=DEVICES, allow_claim_opt_out=True
    )
    assert planned.disable_control
    assert planned.ignored_opt_outs == ()


CONFIG = "status.allocation.devices.config[{}].opaque.parameters"


def test_a_class_opt_out_is_traced_to_the_class_config():
    opt_out = {"disableControl": True, "coreLimitPolicy": "disable"}
    planned = plan(claim([result()], [config("FromClass", opt_out, ["gpu"])]))
    assert planned.honoured_opt_outs == (
        HonouredOptOut(f"{CONFIG.format(0)}.disableControl", OptOutAuthority.CLASS_CONFIG),
        HonouredOptOut(f"{CONFIG.format(0)}.coreLimitPolicy", OptOutAuthority.CLASS_CONFIG),
    )
    message = planned.enforcement_off_message()
    assert message.startswith("claim ns/c (11111111-2222-3333-4444-555555555555): ")
    assert f"{CONFIG.format(0)}.disableControl (allowed by DeviceClass config)" in message
    assert "no memory or SM limit holds" in message


def test_the_class_switch_lets_that_requests_claim_config_opt_out():
    document = claim(
        [result()],
        [
            config("FromClass", {"allowClaimOptOut": True}, ["gpu"]),
            config("FromClaim", {"coreLimitPolicy": "disable"}),
        ],
    )
    planned = plan(document)
    assert (planned.policy, planned.disable_control) == (CorePolicy.DISABLE, False)
    assert planned.ignored_opt_outs == ()
    assert planned.honoured_opt_outs == (
        HonouredOptOut(f"{CONFIG.format(1)}.coreLimitPolicy", OptOutAuthority.CLASS_SWITCH),
    )
    message = planned.enforcement_off_message()
    assert "(allowed by class allowClaimOptOut)" in message
    assert "SM throttling is off; the memory limits hold" in message


def test_the_class_switch_covers_only_the_requests_its_config_applies_to():
    document = claim(
        [result("gpu-0", request="trusted"), result("gpu-1", request="other")],
        [
            config("FromClass", {"allowClaimOptOut": True}, ["trusted"]),
            config("FromClaim", {"disableControl": True}, ["trusted"]),
            config("FromClaim", {"coreLimitPolicy": "disable"}, ["other"]),
        ],
    )
    planned = plan(document)
    assert (planned.disable_control, planned.policy) == (True, CorePolicy.DEFAULT)
    assert planned.ignored_opt_outs == (f"{CONFIG.format(2)}.coreLimitPolicy",)
    assert planned.honoured_opt_outs == (
        HonouredOptOut(f"{CONFIG.format(1)}.disableControl", OptOutAuthority.CLASS_SWITCH),
    )


def test_a_later_class_config_can_take_the_switch_back():
    document = claim(
        [result()],
        [
            config("FromClass", {"allowClaimOptOut": True}),
            config("FromClass", {"allowClaimOptOut": False}),
            config("FromClaim", {"disableControl": True}),
        ],
    )
    planned = plan(document)
    assert not planned.disable_control
    assert planned.ignored_opt_outs == (f"{CONFIG.format(2)}.disableControl",)
    assert planned.honoured_opt_outs == ()


def test_the_driver_flag_is_named_when_it_allowed_the_claims_opt_out():
    document = claim([result()], [config("FromClaim", {"disableControl": True})])
    planned = plan_claim(
        document, driver=DRIVER, pool="node-a", devices=DEVICES, allow_claim_opt_out=True
    )
    assert planned.honoured_opt_outs == (
        HonouredOptOut(f"{CONFIG.format(0)}.disableControl", OptOutAuthority.DRIVER_FLAG),
    )
    assert "(allowed by --allow-claim-opt-out)" in planned.enforcement_off_message()


def test_a_claim_keeping_control_on_over_its_class_honours_nothing():
    document = claim(
        [result()],
        [
            config("FromClass", {"disableControl": True, "coreLimitPolicy": "disable"}),
            config("FromClaim", {"disableControl": False, "coreLimitPolicy": "force"}),
        ],
    )
    planned = plan(document)
    assert (planned.disable_control, planned.policy) == (False, CorePolicy.FORCE)
    assert planned.honoured_opt_outs == ()


def test_a_core_opt_out_another_result_overrides_is_not_reported():
    """The plan takes the first non-default core policy; a `disable` it did not take
    is not in effect, so the claim is not told its throttling is off."""
    document = claim(
        [result("gpu-0", request="a"), result("gpu-1", request="b")],
        [
            config("FromClass", {"coreLimitPolicy": "force"}, ["a"]),
            config("FromClass", {"coreLimitPolicy": "disable"}, ["b"]),
        ],
    )
    planned = plan(document)
    assert planned.policy is CorePolicy.FORCE
    assert planned.honoured_opt_outs == ()


def test_one_claim_config_for_two_results_is_named_once():
    document = claim(
        [result("gpu-0"), result("gpu-1")], [config("FromClaim", {"disableControl": True})]
    )
    assert plan(document).ignored_opt_outs == (f"{CONFIG.format(0)}.disableControl",)


@pytest.mark.parametrize("value", [True, False])
def test_a_claims_own_allow_switch_fails_the_prepare_naming_the_field(value: bool):
    document = claim([result()], [config("FromClaim", {"allowClaimOptOut": value})])
    with pytest.raises(InvalidParameterError) as raised:
        plan(document)
    assert raised.value.field == CONFIG.format(0)
    assert (
        f"{CONFIG.format(0)}.allowClaimOptOut: only a DeviceClass's config may set it, "
        "not a claim's"
    ) in str(raised.value)
    assert "claim ns/c (11111111-2222-3333-4444-555555555555)" in str(raised.value)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"metadata": {"name": "c"}, "status": {}}, "is not allocated"),
        (claim([result(pool="node-b")]), "no device of driver vgpu.hami.io in pool node-a"),
        (claim([result("gpu-9")]), "device 'gpu-9' is not published by this node"),
        (claim([result(memory="81Gi")]), "outside 1Mi.."),
        (claim([result(cores="150")]), "150 cores exceed the device's 100"),
        (claim([result(memory="lots")]), "consumedCapacity.memory"),
        (
            claim([result()], [config("FromClaim", {"cores": 300})]),
            "config[0].opaque.parameters.cores: must be between 0 and 100",
        ),
    ],
)
def test_bad_claims_are_refused_with_the_field(document, message):
    with pytest.raises(InvalidParameterError) as raised:
        plan(document)
    assert message in str(raised.value)


def test_foreign_config_is_ignored_even_when_invalid():
    document = claim([result()], [config("FromClaim", {"nonsense": 1}, driver="other.io")])
    assert plan(document).grants[0].memory_limit_bytes == 80 * GIB


def test_safety_net_counts_already_prepared_shares():
    planned = plan(claim([result(memory="30Gi", cores="60")]))
    assert overcommitted([("gpu-0", 50 * GIB, 40)], planned, DEVICES) is None
    memory = overcommitted([("gpu-0", 51 * GIB, 0)], planned, DEVICES)
    assert memory is not None and "over-commits device gpu-0" in memory
    cores = overcommitted([("gpu-0", 0, 41)], planned, DEVICES)
    assert cores is not None and "101 cores prepared, 100 available" in cores
    assert overcommitted([("gpu-1", 80 * GIB, 100)], planned, DEVICES) is None


def test_config_within_a_scheduler_charge_sets_the_limits_and_is_reported():
    """kube-scheduler charged the defaults (the whole card, no cores) for a claim
    whose VGPUConfig asked for 2Gi and 20 cores: the container gets 2Gi and 20."""
    document = claim(
        [result(memory="80Gi", cores="0", shares="1")],
        [config("FromClaim", {"memory": "2Gi", "cores": 20})],
    )
    planned = plan(document)
    (grant,) = planned.grants
    assert (grant.memory_limit_bytes, grant.core_limit) == (2 * GIB, 20)
    (uncharged,) = planned.uncharged
    assert (uncharged.charged_memory_bytes, uncharged.charged_cores) == (80 * GIB, 0)
    message = uncharged.message()
    assert "opaque parameters are not capacity requests" in message
    assert "memory 2Gi, cores 20" in message
    assert 'capacity: {requests: {memory: 2Gi, cores: "20"}}' in message


def test_config_beyond_the_charge_is_capped_at_the_charge():
    document = claim(
        [result(memory="4Gi", cores="30", shares="1")],
        [config("FromClaim", {"memory": "8Gi", "cores": 50})],
    )
    planned = plan(document)
    (grant,) = planned.grants
    assert (grant.memory_limit_bytes, grant.core_limit) == (4 * GIB, 30)
    assert "limited to memory 4Gi, cores 30" in planned.uncharged[0].message()


def test_config_equal_to_the_charge_is_not_reported():
    document = claim(
        [result(memory="2Gi", cores="20", shares="1")],
        [config("FromClaim", {"memory": "2Gi", "cores": 20})],
    )
    planned = plan(document)
    assert (planned.grants[0].memory_limit_bytes, planned.grants[0].core_limit) == (2 * GIB, 20)
    assert planned.uncharged == ()
    assert plan(claim([result(memory="80Gi", cores="0", shares="1")])).uncharged == ()


def test_a_percentage_is_reported_in_whole_mib_as_libvgpu_applies_it():
    document = claim(
        [result(memory="80Gi", cores="0", shares="1")],
        [config("FromClaim", {"memoryPercentage": 33})],
    )
    (uncharged,) = plan(document).uncharged
    assert "limited to memory 27033Mi, no core limit" in uncharged.message()
    assert "capacity: {requests: {memory: 27033Mi}}" in uncharged.message()
