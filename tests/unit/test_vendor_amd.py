"""AMD's legacy backend against HAMi's own test values.

Rows come from HAMi's `pkg/device/amd/device_test.go` (4707fb02):
Test_MutateAdmission, Test_GetNodeDevices, Test_PatchAnnotations,
Test_GenerateResourceRequests, TestDevices_Fit and TestCheckAMDType, with the
memory and core-percentage names HAMi's tests configure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hami_vendor_cases import (
    NO_REQUEST,
    FitCase,
    HamiDevice,
    HamiRequest,
    as_hami,
    container,
    run_fit,
)

from dra_driver.engine.grants import Grant
from dra_driver.engine.vendor_backends.amd import AMDBackend, AMDConfig
from dra_driver.errors import InvalidParameterError

AMD = "AMD"
COUNT, MEMORY, CORES = "amd.com/gpu", "amd.com/gpu-mem", "amd.com/gpu-core-pct"
BACKEND = AMDBackend(
    AMDConfig(resourceCountName=COUNT, resourceMemoryName=MEMORY, resourceCoreName=CORES)
)
ADAPTER = BACKEND.adapter
NOW = datetime(2026, 8, 21, 6, 0, 0, tzinfo=UTC)
MINUTE = timedelta(seconds=60)
INT32_OVER = str(1 << 31)


@pytest.mark.parametrize(
    ("limits", "has"),
    [
        ({COUNT: "2"}, True),
        ({MEMORY: "1024"}, True),
        ({CORES: "50"}, True),
        ({}, False),
        ({COUNT: "1", MEMORY: "1024"}, True),
    ],
)
def test_admission(limits, has) -> None:
    assert BACKEND.mutate(container(limits), {}, "c").has_resource is has


def test_admission_reads_limits_only() -> None:
    assert not BACKEND.mutate(container({}, {COUNT: "1"}), {}, "c").has_resource


@pytest.mark.parametrize("percent", ["0", "101"])
def test_admission_refuses_a_core_percentage_outside_1_to_100(percent) -> None:
    with pytest.raises(InvalidParameterError) as refused:
        BACKEND.mutate(container({COUNT: "1", CORES: percent}), {}, "spec.containers[0]")
    assert refused.value.field == f"spec.containers[0].resources.limits.{CORES}"
    assert "must be an integer percentage between 1 and 100" in refused.value.reason


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        (
            {COUNT: "2", MEMORY: "4096", CORES: "33"},
            {COUNT: "99", MEMORY: "99", CORES: "99"},
            HamiRequest(2, AMD, 4096, 0, 33),
        ),
        ({MEMORY: "4096", CORES: "33"}, None, NO_REQUEST),
        ({COUNT: "1", MEMORY: "4096"}, None, HamiRequest(1, AMD, 4096, 0, 100)),
        ({COUNT: "0"}, None, NO_REQUEST),
        ({COUNT: INT32_OVER}, None, NO_REQUEST),
        ({COUNT: "1", MEMORY: "-1"}, None, NO_REQUEST),
        ({COUNT: "1", MEMORY: INT32_OVER}, None, NO_REQUEST),
        ({COUNT: "1", CORES: "0"}, None, NO_REQUEST),
        ({COUNT: "1", CORES: "101"}, None, NO_REQUEST),
    ],
)
def test_request_generation(limits, requests, want) -> None:
    assert as_hami(ADAPTER.read_request(container(limits, requests), {}, "c", None)) == want


def node(register: str | None, capacity: str = "1") -> dict:
    annotations = {} if register is None else {"hami.io/node-amd-register": register}
    return {
        "metadata": {"name": "node-1", "annotations": annotations},
        "status": {"capacity": {COUNT: capacity}},
    }


REGISTER = (
    '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd",'
    '"numa":0,"health":true}]'
)


def test_node_devices_from_the_json_register() -> None:
    read = BACKEND.node_devices(node(REGISTER), NOW, MINUTE)
    (device,) = read.devices
    assert (device.id, device.type, device.memory_mib, device.cores) == ("GPU-0", "amd", 8192, 100)
    assert BACKEND.node_devices(node(None), NOW, MINUTE).problem == "node unregistered"
    assert BACKEND.handshake_key is None


def test_node_devices_need_the_count_in_capacity() -> None:
    """CheckHealth: a zero (or absent) capacity drops the vendor's devices."""
    gone = BACKEND.node_devices(node(REGISTER, capacity="0"), NOW, MINUTE)
    assert gone.devices == () and not gone.healthy and "capacity is 0" in gone.problem


def test_legacy_colon_list_is_not_read() -> None:
    read = BACKEND.node_devices(node("GPU-0,1,8192,100,AMD,0,true:"), NOW, MINUTE)
    assert read.devices == () and "not valid JSON" in read.problem


def amd(id_: str, **kw) -> HamiDevice:
    return HamiDevice(id_, **{"count": 2, "totalmem": 1000, "totalcore": 100, "type": AMD, **kw})


def req(nums: int = 1, memreq: int = 100, coresreq: int = 10) -> HamiRequest:
    return HamiRequest(nums, AMD, memreq, 0, coresreq)


def test_fit_two_whole_cards() -> None:
    """No memory takes the whole card, and with it every compute unit."""
    case = FitCase("whole", (amd("dev-0"), amd("dev-1", index=1, count=12)), req(2, 0, 0), True, 2)
    picks, reason = run_fit(case, ADAPTER)
    assert reason == "" and picks is not None
    assert [(g.uuid, g.memory_mib, g.cores) for g in picks] == [
        ("dev-1", 1000, 100),
        ("dev-0", 1000, 100),
    ]


@pytest.mark.parametrize(
    ("devices", "request_", "want"),
    [
        ((amd("dev-0", totalcore=10), amd("dev-1", index=1)), req(1, 500, 50), ("dev-1", 500, 50)),
        ((amd("dev-0", totalcore=64),), req(1, 100, 1), ("dev-0", 100, 1)),
        ((amd("dev-0", totalcore=64),), req(1, 100, 101), ("dev-0", 100, 64)),
    ],
)
def test_fit_takes_a_percentage_of_the_compute_units(devices, request_, want) -> None:
    picks, reason = run_fit(FitCase("cu", devices, request_, True, 1), ADAPTER)
    assert reason == "" and picks is not None
    assert (picks[0].uuid, picks[0].memory_mib, picks[0].cores) == want


def test_fit_keeps_the_registered_product_type() -> None:
    product = "AMD_Instinct_MI300X_VF"
    case = FitCase("type", (amd("dev-0", type=product),), req(), True, 1)
    picks, _ = run_fit(case, ADAPTER)
    assert picks is not None and picks[0].device_type == product
    assert BACKEND.pod_annotations((tuple(picks),)) == {
        "hami.io/amd-devices-to-allocate": f"dev-0,{product},100,10:;",
        "hami.io/amd-devices-allocated": f"dev-0,{product},100,10:;",
    }


@pytest.mark.parametrize(
    "case",
    [
        FitCase(
            "insufficient memory",
            (amd("dev-0", usedmem=900),),
            req(1, 500),
            False,
            0,
            reason="1/1 CardInsufficientMemory",
        ),
        FitCase(
            "insufficient core",
            (amd("dev-0", totalcore=10, usedcores=9),),
            req(1, 100, 100),
            False,
            0,
            reason="1/1 CardInsufficientCore",
        ),
        FitCase(
            "uuid mismatch (use)",
            (amd("dev-1"),),
            req(),
            False,
            0,
            reason="1/1 CardUuidMismatch",
            annotations={"amd.com/use-gpu-uuid": "dev-0"},
        ),
        FitCase(
            "time slicing exhausted",
            (amd("dev-0", used=2),),
            req(),
            False,
            0,
            reason="1/1 CardTimeSlicingExhausted",
        ),
        FitCase(
            "unhealthy", (amd("dev-0", health=False),), req(), False, 0, reason="1/1 CardNotHealth"
        ),
    ],
    ids=lambda case: case.name,
)
def test_fit_refusals(case: FitCase) -> None:
    assert run_fit(case, ADAPTER) == (None, case.reason)


@pytest.mark.parametrize(
    ("annotations", "card", "allowed"),
    [
        ({}, "MI300X", True),
        ({"amd.com/use-gputype": "MI300"}, "MI300X", True),
        ({"amd.com/use-gputype": "MI250"}, "MI300X", False),
        ({"amd.com/nouse-gputype": "MI300"}, "MI300X", False),
        ({"amd.com/nouse-gputype": "MI250"}, "MI300X", True),
        ({"amd.com/nouse-gputype": ""}, "MI300X", True),
        ({"amd.com/use-gputype": ""}, "MI300X", True),
        ({"amd.com/nouse-gputype": "   "}, "MI300X", True),
        ({"amd.com/use-gputype": "   "}, "MI300X", True),
        ({"amd.com/nouse-gputype": "MI250,"}, "MI300X", True),
        ({"amd.com/nouse-gputype": ",MI250"}, "MI300X", True),
        ({"amd.com/nouse-gputype": " MI250 , "}, "MI250X", False),
        ({"amd.com/nouse-gputype": ", "}, "MI300X", True),
        ({"amd.com/use-gputype": "MI300,"}, "MI250X", False),
        ({"amd.com/use-gputype": ", "}, "MI300X", False),
    ],
)
def test_type_filter(annotations, card, allowed) -> None:
    """TestCheckAMDType, through the Fit (CardTypeMismatch when refused)."""
    case = FitCase("type", (amd("dev-0", type=card),), req(), allowed, 1, annotations=annotations)
    picks, reason = run_fit(case, ADAPTER)
    assert (picks is not None, reason) == (allowed, "" if allowed else "1/1 CardTypeMismatch")


def test_pod_annotations() -> None:
    """Test_PatchAnnotations: EncodePodSingleDevice of the AMD grants under both keys."""
    grants = ((Grant("test1", AMD, 100, 3, 0), Grant("test2", AMD, 200, 4, 1)),)
    encoded = "test1,AMD,100,3:test2,AMD,200,4:;"
    assert BACKEND.pod_annotations(grants) == {
        "hami.io/amd-devices-to-allocate": encoded,
        "hami.io/amd-devices-allocated": encoded,
    }
