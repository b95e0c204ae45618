"""Enflame DRS against the values of HAMi's pkg/device/enflame/device_test.go."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from hami_vendor_cases import HamiDevice, container
from vendor_fit_helpers import run_fit

from dra_driver.engine.grants import Grant
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends import enflame_drs
from dra_driver.engine.vendor_backends.base import PatchContext
from dra_driver.errors import InvalidParameterError

PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}
CAPACITY = json.dumps(
    {"devices": [{"index": "0", "minor": "0", "capacity": 6}], "profiles": PROFILES},
    separators=(",", ":"),
)
R = partial(DeviceRequest, "Enflame", 1)
BIG = 4294967299
EXCLUSIVE = "ExclusiveDeviceAllocateConflict"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def card(used: int = 0, count: int = 6, health: bool = True, profiles=PROFILES) -> HamiDevice:
    return HamiDevice(
        id="node-a-enflame-drs-0", count=count, used=used, totalmem=40960, type="Enflame",
        health=health, custom_info={"minor": "0", "index": "0", "profiles": dict(profiles)},
    )  # fmt: skip


def test_node_devices() -> None:
    """TestGetNodeDevices_DRSAnnotation."""
    node = {
        "metadata": {"name": "node-a", "annotations": {"enflame.com/gcu-drs-capacity": CAPACITY}}
    }
    found = enflame_drs.EnflameDrsBackend().node_devices(node, NOW, timedelta(seconds=60))
    assert [
        (d.id, d.type, d.memory_mib, d.count, d.custom_info["minor"]) for d in found.devices
    ] == [("node-a-enflame-drs-0", "Enflame", 40960, 6, "0")]
    assert (
        not enflame_drs.EnflameDrsBackend().node_devices({"metadata": {}}, NOW, timedelta()).usable
    )


def test_requests() -> None:
    """TestGenerateResourceRequests and _ByMemoryCore."""
    direct = enflame_drs.drs_request(container({"enflame.com/drs-gcu": "3"}), {}, "c", None)
    assert direct == R(3, enflame_drs.BY_SLICES, 0)
    spec = container({"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "40"})
    assert enflame_drs.drs_request(spec, {}, "c", None) == DeviceRequest(
        "Enflame", 1, 20480, enflame_drs.BY_SPEC, 40
    )
    assert enflame_drs.drs_request(container({}), {}, "c", None) is None


@pytest.mark.parametrize(
    ("request_", "devices", "policy", "want"),
    [
        (R(3, 0, 0), [card()], "spread", (20480, 50)),
        (R(20480, -1, 40), [card()], "spread", (20480, 50)),
        (R(3, 0, 0), [card(profiles={"1g.6gb": "0"})], "spread", "1/1 ModeNotFit"),
        (R(3, 0, 0), [card(used=1, count=2)], "mutex", "1/1 " + EXCLUSIVE),
        (R(3, 0, 0), [card(health=False)], "spread", "1/1 CardNotHealth"),
        (R(3, 101, 0), [card(profiles={f"{BIG}g.{BIG}gb": "0"})], "spread", "1/1 ModeNotFit"),
        (R(3, 101, 0), [card(profiles={f"2g.{BIG}gb": "0"})], "spread", "1/1 ModeNotFit"),
    ],
)  # fmt: skip
def test_fit(request_, devices, policy, want) -> None:
    """TestFit_*: the profile's memory and cores, or HAMi's reason."""
    grants, reason = run_fit(enflame_drs.DRS, devices, request_, policy)
    assert ((grants[0].memory_mib, grants[0].cores) if grants else reason) == want


def test_profile_choice() -> None:
    """3 slices is `3g.20gb` (id 1); 20480 MiB with 40 % cores is the same profile."""
    profiles = enflame_drs.profiles_of(PROFILES, 6)
    chosen = enflame_drs.choose_profile(profiles, R(3, 0, 0))
    assert chosen is not None and (chosen.name, chosen.id, chosen.core_percent) == (
        "3g.20gb",
        "1",
        50,
    )
    by_spec = enflame_drs.choose_profile(profiles, R(20480, -1, 40))
    assert by_spec == chosen


@pytest.mark.parametrize(
    ("limits", "error"),
    [
        ({"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "50"}, None),
        ({"enflame.com/drs-gcu": "0"}, "enflame.com/drs-gcu must be greater than 0"),
        ({"enflame.com/gcu-core": "101"}, "enflame.com/gcu-core must be in range (0,100]"),
    ],
)
def test_webhook(limits, error) -> None:
    """TestMutateAdmission_ByMemoryCoreAPI; values mirrored into requests."""
    backend = enflame_drs.EnflameDrsBackend()
    if error is not None:
        with pytest.raises(InvalidParameterError) as raised:
            backend.mutate(container(limits), {}, "c")
        assert raised.value.reason == error
        return
    mutation = backend.mutate(container(limits), {}, "c")
    assert mutation.has_resource and mutation.requests == limits and not mutation.limits


def test_pod_annotations() -> None:
    """TestPatchAnnotations_DRSFields."""
    backend = enflame_drs.EnflameDrsBackend()
    node = {
        "metadata": {"name": "node-a", "annotations": {"enflame.com/gcu-drs-capacity": CAPACITY}}
    }
    devices = backend.node_devices(node, NOW, timedelta(seconds=60)).devices
    grants = [(Grant("node-a-enflame-drs-0", "Enflame", 20480, 50, 0),)]
    pod = {"spec": {"containers": [{"name": "pod-gcu-example1"}]}}
    context = PatchContext(pod=pod, devices=devices, requests=((R(3, 0, 0),),), now_ns=7)
    got = backend.pod_annotations(grants, context)
    assert (
        got["hami.io/enflame-vgpu-devices-allocated"] == "node-a-enflame-drs-0,Enflame,20480,50:;"
    )
    assert got["enflame.com/gcu-assigned"] == "false"
    assert got["enflame.com/gcu-assigned-index"] == got["enflame.com/gcu-assigned-id"] == "0"
    assert got["enflame.com/gcu-assigned-minor"] == "0"
    assert got["enflame.com/gcu-request-size"] == "3"
    assert got["enflame.com/gcu-assigned-time"] == "7"
    assert json.loads(got["assigned-containers"]) == {
        "pod-gcu-example1": {
            "allocated": False,
            "request": 3,
            "profileID": "1",
            "profileName": "3g.20gb",
        }
    }
