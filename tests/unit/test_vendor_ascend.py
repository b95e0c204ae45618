"""Ascend's legacy backend against HAMi's own test values (pkg/device/ascend/device_test.go):
chip config and per-chip keys, request generation, the webhook, node decoding and
health, and the pod annotations. Fit and ScoreNode are in test_vendor_ascend_fit.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ascend_hami_configs import (
    ASCEND_910A,
    ASCEND_910B3_CORE,
    ASCEND_910C_SUPERPOD,
    fit_configs,
    with_changes,
)
from hami_vendor_cases import NO_REQUEST, HamiRequest, RequestCase, container

from api import hami_annotations as keys
from dra_driver.engine.grants import Grant
from dra_driver.engine.requests import PodRequest
from dra_driver.engine.vendor_backends import ascend
from dra_driver.engine.vendor_backends.ascend import AscendBackend
from dra_driver.engine.vendor_backends.ascend_chips import (
    HAMI_DEFAULT_SECTION,
    MIB,
    VnpuChip,
    VnpusConfig,
    dra_offer,
)
from dra_driver.engine.vendor_backends.base import PatchContext
from dra_driver.engine.vendor_backends.registry import build_backends, read_sections
from dra_driver.errors import InvalidParameterError

NOW = datetime(2026, 8, 21, 6, 0, tzinfo=UTC)
TIMEOUT = timedelta(seconds=60)


def backend(config: dict[str, Any], **section: Any) -> AscendBackend:
    chip = VnpuChip.model_validate(config)
    return AscendBackend(chip, VnpusConfig.model_validate({"configs": [config], **section}))


def as_hami(request) -> HamiRequest:
    """Our DeviceRequest in HAMi's ContainerDeviceRequest terms (None is HAMi's zero value)."""
    if request is None:
        return NO_REQUEST
    return HamiRequest(
        request.count, request.vendor, request.memory_mib, request.memory_percent, request.cores
    )


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


# -- config and per-chip keys (Test_InitDevices)


def test_chip_keys_carry_the_common_word() -> None:
    chip = backend(ASCEND_910A)
    names = chip.adapter.annotations
    assert chip.name == "Ascend910A"
    assert chip.register_key == "hami.io/node-register-Ascend910A"
    assert chip.handshake_key == "hami.io/node-handshake-Ascend910A"
    assert (names.use_uuids, names.no_use_uuids) == (
        "hami.io/use-Ascend910A-uuid",
        "hami.io/no-use-Ascend910A-uuid",
    )
    assert chip.to_allocate_key == "hami.io/Ascend910A-devices-to-allocate"
    assert chip.allocated_key == "hami.io/Ascend910A-devices-allocated"
    assert chip.lock.key == keys.NODE_LOCK


def test_templates_are_sorted_by_memory() -> None:
    shuffled = with_changes(ASCEND_910A, templates=list(reversed(ASCEND_910A["templates"])))
    chip = VnpuChip.model_validate(shuffled)
    assert [t.name for t in chip.templates] == ["vir02", "vir04", "vir08", "vir16"]


def test_ascend_needs_its_flag_and_gives_one_backend_per_chip() -> None:
    sections = read_sections({"vnpus": {"configs": fit_configs()}})
    assert not any(b.name.startswith("Ascend") for b in build_backends(sections))
    enabled = build_backends(sections, frozenset({"enable-ascend"}))
    assert [b.name for b in enabled if isinstance(b, AscendBackend)] == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4",
        "Ascend310P",
    ]


def test_default_config_is_hamis_when_no_file_is_given() -> None:
    enabled = build_backends(None, frozenset({"enable-ascend"}))
    chips = {b.name: b.chip for b in enabled if isinstance(b, AscendBackend)}
    assert chips["Ascend310P"].memory_allocatable == 21527
    assert chips["Ascend310P"].memory_capacity == 24576
    assert [t.memory for t in chips["Ascend910B4"].templates] == [8192, 16384]


def test_a_chip_repeating_a_common_word_is_refused() -> None:
    repeated = [*fit_configs(), with_changes(fit_configs()[3], chipName="910B4-1")]
    sections = read_sections({"vnpus": {"configs": repeated}})
    with pytest.raises(InvalidParameterError, match="Ascend910B4"):
        build_backends(sections, frozenset({"enable-ascend"}))


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"commonWord": "Ascend 910"}, "vnpus.configs.0.commonWord"),
        ({"resourceMemoryName": ""}, "vnpus.configs.0.resourceMemoryName"),
        ({"templates": [{"name": "vir01", "memory": 0}]}, "vnpus.configs.0.templates.0.memory"),
    ],
)
def test_a_bad_chip_config_names_its_key(change: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidParameterError, match=where):
        read_sections({"vnpus": {"configs": [with_changes(ASCEND_910A, **change)]}})


# -- GenerateResourceRequests


def _memory_rows(prefix: str, count: str, memory: str) -> dict[str, str]:
    return {f"huawei.com/{prefix}": count, f"huawei.com/{prefix}-memory": memory}


REQUEST_CASES_910A = (
    RequestCase("don't set to limits and request", {}, {}, NO_REQUEST),
    RequestCase(
        "resourcename and resourcememoryname set to limits and request",
        _memory_rows("Ascend910A", "2", "8738"),
        _memory_rows("Ascend910A", "2", "8738"),
        HamiRequest(2, "Ascend910A", 8738, 0, 0),
    ),
    RequestCase(
        "resourcememoryname don't set to limits and requests",
        {"huawei.com/Ascend910A": "2"},
        {"huawei.com/Ascend910A": "2"},
        HamiRequest(2, "Ascend910A", 0, 100, 0),
    ),
)


@pytest.mark.parametrize("case", REQUEST_CASES_910A, ids=lambda c: c.name)
def test_generate_resource_requests(case: RequestCase) -> None:
    chip = backend(ASCEND_910A)
    request = chip.read_request(container(case.limits, case.requests), {}, "c", [])
    assert as_hami(request) == case.want


def test_generate_resource_requests_core_mode() -> None:
    chip = backend(with_changes(ASCEND_910B3_CORE, templates=[{"name": "vir08", "memory": 8738}]))
    limits = {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-core": "10",
        "huawei.com/Ascend910B3-memory": "15360",
    }
    request = chip.read_request(container(limits), {}, "c", [])
    assert as_hami(request) == HamiRequest(1, "Ascend910B3", 15360, 0, 10)


@pytest.mark.parametrize(("factor", "memory"), [(10, 1280), (100, 12800), (0, 128)])
def test_generate_resource_requests_memory_factor(factor: int, memory: int) -> None:
    chip = backend(with_changes(ASCEND_910A, memoryFactor=factor))
    resources = _memory_rows("Ascend910A", "1", "128")
    request = chip.read_request(container(resources, resources), {}, "c", [])
    assert as_hami(request) == HamiRequest(1, "Ascend910A", memory, 0, 0)


OUT_OF_RANGE = {
    "memory requested in bytes exceeds int32 range on soft-partitioning path": {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-core": "10",
        "huawei.com/Ascend910B3-memory": "16Gi",
    },
    "memory requested in bytes exceeds int32 range on trim path": {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "16Gi",
    },
    "negative fractional memory request": {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "-1m",
    },
    "negative whole memory request": {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "-100",
    },
    "oversized device count exceeds int32 range": {"huawei.com/Ascend910B3": "2200000000"},
    "negative core request": {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "-1"},
    "oversized core request exceeds int32 range": {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-core": "2200000000",
    },
}


@pytest.mark.parametrize("limits", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_out_of_range_requests_are_dropped_with_a_reason(limits: dict[str, str]) -> None:
    chip = backend(with_changes(ASCEND_910B3_CORE, memoryAllocatable=65536, memoryCapacity=65536))
    dropped: list[str] = []
    assert chip.read_request(container(limits), {}, "spec.containers[0]", dropped) is None
    assert len(dropped) == 1 and dropped[0].startswith("spec.containers[0].resources.huawei.com/")


@pytest.mark.parametrize("config", [ASCEND_910B3_CORE, ASCEND_910A])
def test_memory_overflowing_after_the_factor_is_dropped(config: dict[str, Any]) -> None:
    chip = backend(with_changes(config, memoryFactor=10))
    word = config["commonWord"]
    limits = {f"huawei.com/{word}": "1", f"huawei.com/{word}-memory": "300000000"}
    dropped: list[str] = []
    assert chip.read_request(container(limits), {}, "c", dropped) is None
    assert "memoryFactor 10" in dropped[0]


def test_request_carries_the_uuid_filters_and_the_mode() -> None:
    chip = backend(ASCEND_910A)
    annotations = {
        "hami.io/use-Ascend910A-uuid": "a, b",
        "hami.io/no-use-Ascend910A-uuid": "c",
        ascend.VNPU_MODE: ascend.HAMI_CORE,
    }
    request = chip.read_request(container({"huawei.com/Ascend910A": "1"}), annotations, "c", [])
    assert request is not None
    assert request.filters.use_uuids == ("a", "b")
    assert request.filters.no_use_uuids == ("c",)
    assert request.filters.modes == ascend.HAMI_CORE


def test_lock_only_for_app_containers_asking_for_the_chip() -> None:
    chip = backend(ASCEND_910A)
    asked = chip.read_request(container({"huawei.com/Ascend910A": "1"}), {}, "c", [])
    assert not chip.needs_lock(PodRequest("ns", "p", containers=((),)))
    assert not chip.needs_lock(PodRequest("ns", "p", containers=((),), init_containers=((asked,),)))
    assert chip.needs_lock(PodRequest("ns", "p", containers=((asked,),)))


# -- MutateAdmission


def mutate(config: dict[str, Any], limits: dict[str, str], requests=None, annotations=None):
    return backend(config).mutate(container(limits, requests), pod(annotations), "c")


def test_admission_without_the_resource_changes_nothing() -> None:
    assert mutate(ASCEND_910A, {}) == ascend.ContainerMutation(False)


def test_admission_multiple_devices_need_whole_chips() -> None:
    limits = _memory_rows("Ascend910A", "2", "8738")
    with pytest.raises(InvalidParameterError, match="vNPU not supported for multiple devices"):
        mutate(ASCEND_910A, limits)


def test_admission_memory_beyond_capacity_is_refused() -> None:
    with pytest.raises(
        InvalidParameterError, match=r"huawei\.com/Ascend910A-memory 40000 is invalid"
    ):
        mutate(ASCEND_910A, _memory_rows("Ascend910A", "2", "40000"))


def test_admission_above_the_largest_template_takes_the_whole_chip() -> None:
    mutation = mutate(ASCEND_910A, _memory_rows("Ascend910A", "1", "20000"), {"x": "1"})
    assert mutation.has_resource
    assert mutation.limits == {"huawei.com/Ascend910A-memory": "32768"}
    assert mutation.requests == {"huawei.com/Ascend910A-memory": "32768"}


@pytest.mark.parametrize(
    ("limits", "memory"),
    [
        (_memory_rows("Ascend910A", "1", "8738"), "8738"),
        ({"huawei.com/Ascend910A": "1"}, "32768"),
        (_memory_rows("Ascend910A", "1", "3000"), "4369"),
    ],
    ids=["template kept", "count only: whole chip", "rounded up to vir04"],
)
def test_admission_writes_memory_into_limits_and_missing_requests(limits, memory) -> None:
    mutation = mutate(ASCEND_910A, limits)
    assert mutation.requests == {"huawei.com/Ascend910A-memory": memory}
    assert mutation.limits == {"huawei.com/Ascend910A-memory": memory}


@pytest.mark.parametrize(
    ("count", "count_in_requests", "limits", "requests"),
    [
        ("1", True, "2", "2"),
        ("1", False, "2", None),
        ("4", True, None, None),
    ],
)
def test_admission_910c_superpod_rounds_one_up_to_a_module(
    count: str, count_in_requests: bool, limits: str | None, requests: str | None
) -> None:
    resource = "huawei.com/Ascend910C"
    mutation = mutate(
        ASCEND_910C_SUPERPOD, {resource: count}, {resource: count} if count_in_requests else {}
    )
    assert mutation.has_resource
    assert mutation.limits.get(resource) == limits
    assert mutation.requests.get(resource) == requests


def test_admission_910c_superpod_refuses_odd_counts() -> None:
    with pytest.raises(InvalidParameterError, match="must be 1 or 2\\*n, got 3"):
        mutate(ASCEND_910C_SUPERPOD, {"huawei.com/Ascend910C": "3"})


SPLIT_910C = with_changes(
    ASCEND_910C_SUPERPOD,
    superPod=False,
    templates=[
        {"name": "vir05_1c_16g", "memory": 16384, "aiCore": 5, "aiCPU": 1},
        {"name": "vir10_3c_32g", "memory": 32768, "aiCore": 10, "aiCPU": 3},
    ],
)


def test_admission_910c_split_keeps_count_and_maps_the_template() -> None:
    mutation = mutate(SPLIT_910C, _memory_rows("Ascend910C", "1", "16384"))
    assert "huawei.com/Ascend910C" not in mutation.limits
    assert mutation.limits["huawei.com/Ascend910C-memory"] == "16384"


def test_admission_910c_split_allows_odd_whole_chip_counts() -> None:
    mutation = mutate(SPLIT_910C, {"huawei.com/Ascend910C": "3"})
    assert mutation.has_resource and "huawei.com/Ascend910C" not in mutation.limits


CORE_MODE_LIMITS = {
    "huawei.com/Ascend910B3": "1",
    "huawei.com/Ascend910B3-memory": "15360",
    "huawei.com/Ascend910B3-core": "20",
}


def test_admission_hami_core_keeps_raw_memory_and_core() -> None:
    mutation = mutate(
        ASCEND_910B3_CORE, CORE_MODE_LIMITS, annotations={ascend.VNPU_MODE: ascend.HAMI_CORE}
    )
    assert mutation.limits == {"huawei.com/Ascend910B3-memory": "15360"}


def test_admission_hard_split_without_templates_takes_the_whole_chip() -> None:
    limits = {k: v for k, v in CORE_MODE_LIMITS.items() if not k.endswith("-core")}
    assert mutate(ASCEND_910B3_CORE, limits).limits == {"huawei.com/Ascend910B3-memory": "32768"}


HARD_SPLIT_TEMPLATES = with_changes(
    ASCEND_910B3_CORE,
    templates=[{"name": "vir08", "memory": 8738, "aiCore": 8}, {"name": "vir16", "memory": 17476}],
)


@pytest.mark.parametrize(
    ("core", "hami_core", "refused"),
    [("10", False, True), ("25", False, True), ("0", False, False), (None, False, False),
     ("10", True, False)],
    ids=["core refused", "core over physical refused", "core 0", "no core", "hami-core core"],
)  # fmt: skip
def test_admission_core_only_in_hami_core_mode(core, hami_core: bool, refused: bool) -> None:
    limits = _memory_rows("Ascend910B3", "1", "8738")
    if core is not None:
        limits["huawei.com/Ascend910B3-core"] = core
    annotations = {ascend.VNPU_MODE: ascend.HAMI_CORE} if hami_core else None
    if refused:
        with pytest.raises(InvalidParameterError, match="hami-core") as error:
            mutate(HARD_SPLIT_TEMPLATES, limits, dict(limits), annotations)
        assert error.value.field == "c.resources.huawei.com/Ascend910B3-core"
    else:
        assert mutate(HARD_SPLIT_TEMPLATES, limits, dict(limits), annotations).has_resource


def test_runtime_class_is_the_chips() -> None:
    assert backend(with_changes(ASCEND_910A, runtimeClassName="ascend")).runtime_class_name == (
        "ascend"
    )


def test_overwrite_env_hides_npus_only_from_containers_without_any_chip() -> None:
    configs = [with_changes(c, overwriteEnv=True) for c in fit_configs()]
    section = VnpusConfig.model_validate({"configs": configs})
    chips = ascend.build(section)
    plain, other_chip = container({"cpu": "1"}), container({"huawei.com/Ascend310P": "1"})
    env_of = [chip.mutate(plain, pod(), "c").env for chip in chips]
    assert env_of[0] == ({"name": "ASCEND_VISIBLE_DEVICES", "value": ""},)
    assert all(env == () for env in env_of[1:])
    assert all(chip.mutate(other_chip, pod(), "c").env == () for chip in chips)


# -- GetNodeDevices and CheckHealth


def node(annotations: dict[str, str], allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "annotations": annotations},
        "status": {"allocatable": allocatable or {}},
    }


REGISTER = (
    '[{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,'
    '"Type":"huawei.com/Ascend910","Numa":0,"Health":true}]'
)


def test_node_devices_decode_json_with_any_key_case() -> None:
    chip = backend(ASCEND_910A)
    found = chip.node_devices(node({chip.register_key: REGISTER}), NOW, TIMEOUT)
    assert found.usable and found.register_value == REGISTER
    (device,) = found.devices
    assert (device.id, device.count, device.cores, device.memory_mib) == ("GPU-0", 4, 8, 8738)
    assert (device.numa, device.healthy, device.type) == (0, True, "Ascend910A")
    assert device.mode == ascend.HARD_SPLIT


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        ({"hami.io/node-register-Ascend910A": "[]"}, "no device found on node"),
        ({}, "node unregistered"),
        ({"hami.io/node-register-Ascend910A": ""}, "not valid JSON"),
        ({"hami.io/node-register-Ascend910A": "GPU-0,4,8738,8,x,0,true:"}, "not valid JSON"),
    ],
    ids=["no device", "no annotation", "failed to unmarshal", "legacy codec is not read"],
)
def test_node_without_devices_is_not_usable(annotations: dict[str, str], problem: str) -> None:
    found = backend(ASCEND_910A).node_devices(node(annotations), NOW, TIMEOUT)
    assert not found.usable and not found.devices and problem in found.problem


def test_node_network_id_is_kept_in_custom_info() -> None:
    chip = backend(ASCEND_910A)
    register = '[{"id":"d0","count":1,"devmem":1,"health":true,"customInfo":{"NetworkID":3}}]'
    (device,) = chip.node_devices(node({chip.register_key: register}), NOW, TIMEOUT).devices
    assert device.custom_info == {"NetworkID": 3}


@pytest.mark.parametrize(
    ("node_value", "global_value", "mode"),
    [(None, False, "vnpu"), (None, True, "hami-core"), ("true", False, "hami-core"),
     ("false", True, "vnpu")],
)  # fmt: skip
def test_node_soft_split_follows_its_annotation_then_the_global(node_value, global_value, mode):
    chip = backend(ASCEND_910A, hamiVnpuCore=global_value)
    annotations = {chip.register_key: REGISTER}
    if node_value is not None:
        annotations[ascend.NODE_HAMI_CORE] = node_value
    (device,) = chip.node_devices(node(annotations), NOW, TIMEOUT).devices
    assert device.mode == mode


@pytest.mark.parametrize(
    ("handshake", "healthy"),
    [
        ("Requesting_2026-08-21 05:59:30", True),
        ("Unknown", True),
        ("Requesting_2024-01-02 00:00:00", False),
    ],
    ids=["Requesting state", "Unknown state", "Requesting state expired"],
)
def test_check_health_by_the_chip_handshake(handshake: str, healthy: bool) -> None:
    chip = backend(ASCEND_910A)
    annotations = {chip.register_key: REGISTER, "hami.io/node-handshake-Ascend910A": handshake}
    found = chip.node_devices(node(annotations), NOW, TIMEOUT)
    assert found.healthy is healthy
    assert all(device.healthy is healthy for device in found.devices)


def test_expired_handshake_with_allocatable_npus_stays_healthy() -> None:
    chip = backend(ASCEND_910A)
    annotations = {
        chip.register_key: REGISTER,
        chip.handshake_key: "Requesting_2024-01-02 00:00:00",
    }
    found = chip.node_devices(node(annotations, {"huawei.com/Ascend910A": "4"}), NOW, TIMEOUT)
    assert found.healthy


# -- PatchAnnotations


def grants(*containers: list[tuple[str, int, int]], vendor: str = "Ascend910A") -> list:
    return [
        tuple(Grant(uuid, vendor, memory, cores, 0, "Ascend") for uuid, memory, cores in ctr)
        for ctr in containers
    ]


PATCH_910A = with_changes(ASCEND_910A, memoryCapacity=1024)
"""Test_PatchAnnotations' chip (its memoryCapacity is 1024)."""


def test_pod_annotations_exist_device() -> None:
    chip = backend(PATCH_910A)
    result = chip.pod_annotations(
        grants([("device-0", 8738, 1)]), PatchContext(assigned={keys.VGPU_TIME: "17"})
    )
    assert result == {
        "hami.io/Ascend910A-devices-to-allocate": "device-0,Ascend,8738,1:;",
        "hami.io/Ascend910A-devices-allocated": "device-0,Ascend,8738,1:;",
        "predicate-time": "17",
        "huawei.com/Ascend910A": '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
    }


def test_pod_annotations_no_device() -> None:
    assert (
        backend(PATCH_910A).pod_annotations([(), ()], PatchContext(assigned={keys.VGPU_TIME: "1"}))
        == {}
    )


def test_pod_annotations_hami_core_mode_has_no_template() -> None:
    chip = backend(with_changes(ASCEND_910B3_CORE, memoryAllocatable=0, memoryCapacity=0))
    assigned = {keys.VGPU_TIME: "1", ascend.VNPU_MODE: ascend.HAMI_CORE}
    result = chip.pod_annotations(
        grants([("ascend-uuid-1", 8192, 5)], vendor="Ascend910B3"), PatchContext(assigned=assigned)
    )
    assert json.loads(result["huawei.com/Ascend910B3"]) == [
        {"UUID": "ascend-uuid-1", "memory": 8192, "core": 5}
    ]
    assert result["huawei.com/Ascend910B3"] == '[{"UUID":"ascend-uuid-1","memory":8192,"core":5}]'


def test_pod_annotations_zero_core_is_left_out() -> None:
    chip = backend(ASCEND_910A)
    result = chip.pod_annotations(grants([("device-zero-core", 8738, 0)]))
    assert result["huawei.com/Ascend910A"] == (
        '[{"UUID":"device-zero-core","temp":"vir08","memory":8738}]'
    )
    assert result["predicate-time"].isdigit()


def test_pod_annotations_list_every_container_in_order() -> None:
    chip = backend(ASCEND_910A)
    result = chip.pod_annotations(
        grants([("a", 2184, 0)], [], [("b", 32768, 0), ("c", 17476, 0)]),
        PatchContext(assigned={keys.VGPU_TIME: "5"}),
    )
    assert result["hami.io/Ascend910A-devices-allocated"] == (
        "a,Ascend,2184,0:;;b,Ascend,32768,0:c,Ascend,17476,0:;"
    )
    assert [entry.get("temp") for entry in json.loads(result["huawei.com/Ascend910A"])] == [
        "vir02",
        None,
        "vir16",
    ]


def test_pod_annotations_read_back_as_usage() -> None:
    chip = backend(ASCEND_910A)
    written = chip.pod_annotations(grants([("a", 2184, 0)]))
    (held,) = chip.allocated_devices(written) or []
    assert [(d.uuid, d.usedmem) for d in held] == [("a", 2184)]


# -- the DRA offer


def test_dra_offer_hard_split_publishes_templates_and_the_whole_chip() -> None:
    chip = VnpuChip.model_validate(HAMI_DEFAULT_SECTION["configs"][4])
    offer = dra_offer(chip, soft_split=False)
    assert offer.memory_bytes == 24576 * MIB
    assert offer.memory_valid_bytes == tuple(m * MIB for m in (3072, 6144, 12288, 21527))
    assert offer.cores_valid == (0,)
    assert offer.ai_cores == 8
    assert dict(offer.templates)[6144 * MIB] == "vir02"


def test_dra_offer_soft_split_takes_any_memory_and_cores() -> None:
    chip = VnpuChip.model_validate(HAMI_DEFAULT_SECTION["configs"][0])
    offer = dra_offer(chip, soft_split=True)
    assert (offer.memory_bytes, offer.memory_valid_bytes, offer.cores_valid) == (
        32768 * MIB,
        (),
        (),
    )
