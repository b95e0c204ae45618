"""The stubs speak kubelet's wire format: names, numbers and the captured messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from wire_fixtures import FIXTURES, load_fixture

from api.generated import deviceplugin_v1beta1_pb2 as dp
from api.generated import dra_health_v1alpha1_pb2 as health
from api.generated import dra_v1_pb2 as dra_v1
from api.generated import dra_v1beta1_pb2 as dra_v1beta1
from api.generated import pluginregistration_pb2 as registration


@pytest.mark.parametrize(
    ("descriptor", "full_name", "methods"),
    [
        (
            dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"],
            "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
            {"NodePrepareResources": False, "NodeUnprepareResources": False},
        ),
        (
            dra_v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"],
            "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
            {"NodePrepareResources": False, "NodeUnprepareResources": False},
        ),
        (
            registration.DESCRIPTOR.services_by_name["Registration"],
            "pluginregistration.Registration",
            {"GetInfo": False, "NotifyRegistrationStatus": False},
        ),
        (
            health.DESCRIPTOR.services_by_name["DRAResourceHealth"],
            "v1alpha1.DRAResourceHealth",
            {"NodeWatchResources": True},
        ),
        (
            dp.DESCRIPTOR.services_by_name["Registration"],
            "v1beta1.Registration",
            {"Register": False},
        ),
        (
            dp.DESCRIPTOR.services_by_name["DevicePlugin"],
            "v1beta1.DevicePlugin",
            {
                "GetDevicePluginOptions": False,
                "ListAndWatch": True,
                "GetPreferredAllocation": False,
                "Allocate": False,
                "PreStartContainer": False,
            },
        ),
    ],
)
def test_services_have_kubelets_full_names_and_methods(
    descriptor: Any, full_name: str, methods: dict[str, bool]
) -> None:
    assert descriptor.full_name == full_name
    assert {m.name: m.server_streaming for m in descriptor.methods} == methods
    assert not any(m.client_streaming for m in descriptor.methods)


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (dra_v1.Claim, {"namespace": 1, "uid": 2, "name": 3}),
        (
            dra_v1.Device,
            {
                "request_names": 1,
                "pool_name": 2,
                "device_name": 3,
                "cdi_device_ids": 4,
                "share_id": 5,
            },
        ),
        (
            dra_v1beta1.Device,
            {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4},
        ),
        (dra_v1.NodePrepareResourceResponse, {"devices": 1, "error": 2}),
        (dra_v1.NodeUnprepareResourceResponse, {"error": 1}),
        (
            registration.PluginInfo,
            {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4},
        ),
        (registration.RegistrationStatus, {"plugin_registered": 1, "error": 2}),
        (
            health.DeviceHealth,
            {
                "device": 1,
                "health": 2,
                "last_updated_time": 3,
                "health_check_timeout_seconds": 4,
                "message": 5,
            },
        ),
        (health.DeviceIdentifier, {"pool_name": 1, "device_name": 2}),
        (
            dp.RegisterRequest,
            {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
        ),
        (
            dp.DevicePluginOptions,
            {"pre_start_required": 1, "get_preferred_allocation_available": 2},
        ),
        (dp.Device, {"ID": 1, "health": 2, "topology": 3}),
        (dp.NUMANode, {"ID": 1}),
        (
            dp.ContainerPreferredAllocationRequest,
            {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3},
        ),
        (dp.ContainerPreferredAllocationResponse, {"deviceIDs": 1}),
        (dp.ContainerAllocateRequest, {"devices_ids": 1}),
        (
            dp.ContainerAllocateResponse,
            {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5},
        ),
        (dp.CDIDevice, {"name": 1}),
        (dp.Mount, {"container_path": 1, "host_path": 2, "read_only": 3}),
        (dp.DeviceSpec, {"container_path": 1, "host_path": 2, "permissions": 3}),
    ],
)
def test_field_numbers_match_kubelet(message: type[Message], fields: dict[str, int]) -> None:
    assert {f.name: f.number for f in message.DESCRIPTOR.fields} == fields


def test_health_status_enum_values() -> None:
    assert dict(health.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_claim_encodes_to_kubelets_bytes() -> None:
    claim = dra_v1.Claim(namespace="ns", uid="u1", name="c")

    assert claim.SerializeToString() == b"\x0a\x02ns\x12\x02u1\x1a\x01c"


def test_share_id_is_optional_presence_in_v1_only() -> None:
    device = dra_v1.Device(pool_name="p", device_name="d", share_id="")

    assert device.HasField("share_id")
    assert device.SerializeToString().endswith(b"\x2a\x00")
    assert "share_id" not in dra_v1beta1.Device.DESCRIPTOR.fields_by_name


DRA = "dra-kubelet-plugin/"
DP = "device-plugin/"
CAPTURED: list[tuple[str, str | None, type[Message]]] = [
    (DRA + "get-info.response.json", None, registration.PluginInfo),
    (DRA + "notify-registration-status.request.json", None, registration.RegistrationStatus),
    (
        DRA + "notify-registration-status.response.json",
        None,
        registration.RegistrationStatusResponse,
    ),
    (DRA + "node-prepare-resources.request.json", None, dra_v1.NodePrepareResourcesRequest),
    (DRA + "node-prepare-resources.request.json", None, dra_v1beta1.NodePrepareResourcesRequest),
    (DRA + "node-prepare-resources.response.json", None, dra_v1.NodePrepareResourcesResponse),
    (DRA + "node-prepare-resources.response.json", None, dra_v1beta1.NodePrepareResourcesResponse),
    (DRA + "node-prepare-resources.error-response.json", None, dra_v1.NodePrepareResourcesResponse),
    (DRA + "node-unprepare-resources.request.json", None, dra_v1.NodeUnprepareResourcesRequest),
    (DRA + "node-unprepare-resources.response.json", None, dra_v1.NodeUnprepareResourcesResponse),
    (DP + "register.request.json", None, dp.RegisterRequest),
    (DP + "register.response.json", None, dp.Empty),
    (DP + "get-device-plugin-options.response.json", None, dp.DevicePluginOptions),
    (DP + "list-and-watch.response.json", None, dp.ListAndWatchResponse),
    (DP + "get-preferred-allocation.request.json", None, dp.PreferredAllocationRequest),
    (DP + "get-preferred-allocation.response.json", None, dp.PreferredAllocationResponse),
    (DP + "allocate.request.json", None, dp.AllocateRequest),
    (DP + "allocate.response.json", None, dp.AllocateResponse),
    (DP + "allocate.error.json", "request", dp.AllocateRequest),
    (DP + "pre-start-container.request.json", None, dp.PreStartContainerRequest),
    (DP + "pre-start-container.response.json", None, dp.PreStartContainerResponse),
]


def roundtrip(payload: dict[str, Any], message_type: type[Message]) -> None:
    message = json_format.ParseDict(payload, message_type())
    wire = message.SerializeToString(deterministic=True)
    decoded = message_type.FromString(wire)

    assert decoded.SerializeToString(deterministic=True) == wire
    assert json_format.MessageToDict(decoded, preserving_proto_field_name=True) == payload


@pytest.mark.parametrize(("relative", "key", "message_type"), CAPTURED)
def test_captured_messages_roundtrip_through_the_wire(
    relative: str, key: str | None, message_type: type[Message]
) -> None:
    payload = load_fixture(relative)
    roundtrip(payload[key] if key else payload, message_type)


def test_captured_multi_container_sequence_roundtrips() -> None:
    types = {
        "GetPreferredAllocation": (dp.PreferredAllocationRequest, dp.PreferredAllocationResponse),
        "Allocate": (dp.AllocateRequest, dp.AllocateResponse),
        "PreStartContainer": (dp.PreStartContainerRequest, dp.PreStartContainerResponse),
    }
    calls = load_fixture(DP + "allocate.multi-container.sequence.json")["calls_in_order"]

    for call in calls:
        request_type, response_type = types[call["rpc"]]
        roundtrip(call["request"], request_type)
        roundtrip(call["response"], response_type)
    assert [c["rpc"] for c in calls].count("Allocate") == 3


def test_captured_raw_dra_calls_roundtrip() -> None:
    types = {
        "GetInfo": (registration.InfoRequest, registration.PluginInfo),
        "NotifyRegistrationStatus": (registration.RegistrationStatus, None),
        "NodePrepareResources": (
            dra_v1.NodePrepareResourcesRequest,
            dra_v1.NodePrepareResourcesResponse,
        ),
        "NodeUnprepareResources": (
            dra_v1.NodeUnprepareResourcesRequest,
            dra_v1.NodeUnprepareResourcesResponse,
        ),
    }
    seen = 0
    for line in (FIXTURES / "dra-kubelet-plugin" / "raw-calls.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("rpc") not in types or "event" in record:
            continue
        request_type, response_type = types[record["rpc"]]
        if "request" in record:
            roundtrip(record["request"], request_type)
            seen += 1
        if "response" in record and response_type is not None:
            roundtrip(record["response"], response_type)
            seen += 1
    assert seen == 6
