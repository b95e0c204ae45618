"""Kunlun whole XPUs and vXPUs against the values of HAMi's pkg/device/kunlun tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hami_vendor_cases import HamiDevice, container
from vendor_fit_helpers import run_fit

from dra_driver.engine.grants import Grant
from dra_driver.engine.requests import DeviceFilters, DeviceRequest
from dra_driver.engine.vendor_backends import kunlun

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def eight(used: dict[int, int] | None = None, **fields) -> list[HamiDevice]:
    used = used or {}
    return [HamiDevice(id=f"xpu-{i}", index=i, used=used.get(i, 0), **fields) for i in range(8)]


@pytest.mark.parametrize(
    ("used", "count", "want"),
    [
        ({}, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        ({5: 1}, 8, []),
        ({5: 1}, 2, [4, 6]),
        ({5: 1}, 1, [4]),
        ({6: 1, 7: 1}, 1, [4]),
        ({0: 1, 1: 1, 2: 1, 4: 1, 5: 1, 6: 1}, 2, [3, 7]),
        ({2: 1, 3: 1, 7: 1}, 4, [0, 1, 4, 5]),
        ({3: 1, 6: 1}, 4, [0, 1, 4, 5]),
        ({2: 1, 6: 1}, 4, [0, 1, 4, 5]),
        ({4: 1, 5: 1, 6: 1, 7: 1}, 4, [0, 1, 2, 3]),
        ({0: 1}, 8, []),
        ({}, 3, []),
    ],
)
def test_whole_card_graph_selection(used: dict[int, int], count: int, want: list[int]) -> None:
    """HAMi's Test_graphSelect and topo_test rows (FitXPU: idle and healthy)."""
    grants, reason = run_fit(kunlun.WHOLE, eight(used), DeviceRequest("kunlun", count, 0, 100, 0))
    assert [g.index for g in grants or []] == want
    assert reason == ("" if want else "1/8 NumaNotFit")


@pytest.mark.parametrize(
    ("rows", "count", "want"),
    [
        ([(0, 0)] * 8, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        (
            [(0, 0), (1, 24576), (0, 0), (2, 49152), (0, 0), (1, 49152), (0, 0), (0, 0)],
            4,
            [0, 1, 2, 3],
        ),
        (
            [(0, 0), (2, 49152), (0, 0), (1, 49152), (0, 0), (1, 24576), (0, 0), (0, 0)],
            4,
            [4, 5, 6, 7],
        ),
        ([(1, 49152)] * 8, 2, []),
        ([(1, 24576), (1, 24576), (1, 49152), (0, 0), (0, 0), (1, 24576), (0, 0), (0, 0)], 1, [0]),
        (
            [(0, 0), (2, 49152), (1, 24576), (1, 49152), (0, 0), (0, 0), (1, 24576), (0, 0)],
            2,
            [0, 1],
        ),
    ],
)
def test_vxpu_graph_selection(rows: list[tuple[int, int]], count: int, want: list[int]) -> None:
    """HAMi's Test_graphSelectVXPU: shares only beside shares of the same memory."""
    devices = [
        HamiDevice(id=f"xpu-{i}", index=i, used=u, usedmem=m, totalmem=98304)
        for i, (u, m) in enumerate(rows)
    ]
    grants, _ = run_fit(kunlun.VXPU, devices, DeviceRequest("XPU", count, 24576, 0, 25))
    assert [g.index for g in grants or []] == want
    assert all(g.memory_mib == 24576 and g.cores == 25 for g in grants or [])


def test_vxpu_mutex_and_numa_reasons() -> None:
    """TestKunlunVDevices_Fit_Mutex and _NumaNotFit."""
    shared = eight({i: 1 for i in range(8)}, usedmem=24576, totalmem=98304)
    request = DeviceRequest("XPU", 1, 24576, 0, 25)
    assert run_fit(kunlun.VXPU, shared, request)[0] is not None
    assert run_fit(kunlun.VXPU, shared, request, "mutex") == (
        None,
        "8/8 ExclusiveDeviceAllocateConflict",
    )
    small = eight(totalmem=1024, health=True)
    assert run_fit(kunlun.VXPU, small, DeviceRequest("XPU", 1, 2048, 0, 2)) == (
        None,
        "1/8 NumaNotFit",
    )
    busy = eight({i: 1 for i in range(8)})
    assert run_fit(kunlun.WHOLE, busy, DeviceRequest("kunlun", 1, 0, 100, 0)) == (
        None,
        "1/8 NumaNotFit",
    )


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({"baidu.com/use-gpuuuid": "xpu-5"}, "xpu-5"),
        ({"hami.io/use-xpu-uuid": "xpu-3"}, "xpu-3"),
        ({"hami.io/use-xpu-uuid": "xpu-6"}, "xpu-6"),
        ({"hami.io/use-xpu-uuid": "xpu-99"}, None),
        ({"baidu.com/nouse-gpuuuid": ",".join(f"xpu-{i}" for i in range(8))}, None),
        ({"hami.io/no-use-xpu-uuid": ",".join(f"xpu-{i}" for i in range(8))}, None),
        ({"hami.io/use-xpu-uuid": "xpu-1", "baidu.com/use-gpuuuid": "xpu-2"}, None),
    ],
)
def test_both_uuid_pairs(annotations: dict[str, str], want: str | None) -> None:
    """TestKunlunDevices_Fit_UseUUID / _NoUseUUID / TestKunlunVDevices_Fit_UUIDAnnotations."""
    devices = eight(count=1, totalmem=98304, totalcore=100)
    whole = kunlun.whole_request(container({"kunlunxin.com/xpu": "1"}), annotations, "c", None)
    assert whole is not None
    grants, reason = run_fit(kunlun.WHOLE, devices, whole)
    assert (grants[0].uuid if grants else None) == want
    if want is None:
        assert "CardUuidMismatch" in reason
    vdevices = eight(count=10, totalmem=98304, totalcore=100)
    vreq = DeviceRequest("XPU", 1, 98304, 0, 100, kunlun.uuid_filters(annotations))
    vgrants, vreason = run_fit(kunlun.VXPU, vdevices, vreq)
    assert (vgrants[0].uuid if vgrants else None) == want
    if want is None:
        assert "CardUuidMismatch" in vreason


@pytest.mark.parametrize(
    ("busy", "placed", "score"),
    [
        ([0, 1, 2, 3], list(range(8)), 3000),
        ([], [0], 0),
        ([0], [0, 1], 3000),
        ([0], [4], 2000),
        ([0, 1], [0], 1000),
        ([0, 1, 2, 3], [0], 0),
    ],
)
def test_fragmentation_score(busy: list[int], placed: list[int], score: int) -> None:
    """Test_ScoreNode and TestCalcscore."""
    assert kunlun.fragmentation_score(busy, placed) == score


@pytest.mark.parametrize(
    ("mib", "rounded"),
    [(0, 24576), (24576, 24576), (24577, 49152), (49152, 49152), (49153, 98304), (200000, 98304)],
)
def test_memory_rounding(mib: int, rounded: int) -> None:
    assert kunlun.round_memory(mib) == rounded


def test_requests() -> None:
    """Test_KunlunVDevices_GenerateResourceRequests and the whole-card request."""
    assert kunlun.vxpu_request(container({}), {}, "c", None) is None
    assert kunlun.vxpu_request(container({"kunlunxin.com/vxpu": "1"}), {}, "c", None) == (
        DeviceRequest("XPU", 1, 98304, 100, 100)
    )
    from_requests = container({}, {"kunlunxin.com/vxpu": "2", "kunlunxin.com/vxpu-memory": "24576"})
    assert kunlun.vxpu_request(from_requests, {}, "c", None) == DeviceRequest(
        "XPU", 2, 24576, 0, 25
    )
    assert kunlun.whole_request(container({"kunlunxin.com/xpu": "2"}), {}, "c", None) == (
        DeviceRequest("kunlun", 2, 0, 100, 0, DeviceFilters())
    )


def test_vxpu_webhook_rounds_memory_into_limits_and_requests() -> None:
    """Test_MutateAdmission: 30000 becomes 49152 in both."""
    backend = kunlun.KunlunVxpuBackend()
    assert not backend.mutate(container({}), {}, "c").has_resource
    plain = backend.mutate(container({"kunlunxin.com/vxpu": "1"}), {}, "c")
    assert plain.has_resource and not plain.limits
    trimmed = backend.mutate(
        container({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "30000"}), {}, "c"
    )
    assert trimmed.limits == {"kunlunxin.com/vxpu-memory": "49152"}
    assert trimmed.requests == {"kunlunxin.com/vxpu-memory": "49152"}


def test_node_devices() -> None:
    """Whole cards from capacity (upper half on NUMA 1); vXPUs from the JSON register."""
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"kunlunxin.com/xpu": "8"}}}
    whole = kunlun.KunlunBackend().node_devices(node, NOW, timedelta(seconds=60))
    assert [d.id for d in whole.devices] == [f"n1-kunlun-{i}" for i in range(8)]
    assert [d.numa for d in whole.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {(d.memory_mib, d.cores, d.count, d.type) for d in whole.devices} == {
        (98304, 100, 100, "kunlun")
    }
    assert not kunlun.KunlunBackend().node_devices({"metadata": {}}, NOW, timedelta()).usable
    register = json.dumps(
        [{"id": "xpu-0", "index": 0, "count": 1, "devmem": 98304, "devcore": 100, "type": "XPU",
          "health": True}]
    )  # fmt: skip
    vnode = {"metadata": {"name": "n1", "annotations": {"hami.io/node-register-xpu": register}}}
    vxpu = kunlun.KunlunVxpuBackend().node_devices(vnode, NOW, timedelta(seconds=60))
    assert [(d.id, d.memory_mib, d.type) for d in vxpu.devices] == [("xpu-0", 98304, "XPU")]
    bad = {"metadata": {"annotations": {"hami.io/node-register-xpu": "not-json"}}}
    assert not kunlun.KunlunVxpuBackend().node_devices(bad, NOW, timedelta(seconds=60)).usable


def test_pod_annotations() -> None:
    """Whole cards: only the allocated key plus BAIDU_COM_DEVICE_IDX; vXPU: both keys."""
    whole = kunlun.KunlunBackend().pod_annotations(
        [
            (
                Grant("n1-kunlun-0", "kunlun", 98304, 100, 0),
                Grant("n1-kunlun-1", "kunlun", 98304, 100, 1),
            )
        ]
    )
    assert whole == {
        "hami.io/kunlun-allocated": "n1-kunlun-0,kunlun,98304,100:n1-kunlun-1,kunlun,98304,100:;",
        "BAIDU_COM_DEVICE_IDX": "0,1",
    }
    vxpu = kunlun.KunlunVxpuBackend().pod_annotations([(Grant("xpu-0", "XPU", 24576, 100, 0),)])
    assert vxpu == {
        "hami.io/xpu-devices-to-allocate": "xpu-0,XPU,24576,100:;",
        "hami.io/xpu-devices-allocated": "xpu-0,XPU,24576,100:;",
    }
    assert kunlun.KunlunVxpuBackend().pod_annotations([]) == {}
