"""Building a claim's CDI spec from libvgpu's edits: exact output, names, refusals."""

from __future__ import annotations

import json

import pytest

from cdi.errors import InvalidCdiNameError, InvalidCdiSpecError
from cdi.spec import (
    CDI_VERSION,
    NVIDIA_CONTROL_DEVICE_NODES,
    CdiDeviceNode,
    ClaimDeviceEdits,
    build_claim_spec,
    nvidia_device_node,
)
from cdi.validate import minimum_cdi_version, validate_claim_spec
from dra_driver.errors import InvalidParameterError
from libvgpu.container_edits import ContainerEdits, EnvVar, Mount

UID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"
SHARE_A = "0b9a5c1e-2d3f-4a6b-8c7d-9e0f1a2b3c4d"
SHARE_B = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
CACHE = f"/usr/local/vgpu/claims/{UID}"

EDITS = ContainerEdits(
    env=(
        EnvVar("NVIDIA_VISIBLE_DEVICES", "GPU-1111"),
        EnvVar("CUDA_DEVICE_MEMORY_LIMIT_0", "4096m"),
        EnvVar("CUDA_DEVICE_MEMORY_SHARED_CACHE", f"{CACHE}/a.cache"),
    ),
    mounts=(
        Mount(CACHE, CACHE, read_only=False),
        Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", read_only=True),
    ),
)

HOST_NODES = {
    path: path for path in (*NVIDIA_CONTROL_DEVICE_NODES, *map(nvidia_device_node, range(4)))
}
"""A host with four GPUs and every control node."""

EXPECTED_JSON = f"""{{
  "cdiVersion": "0.5.0",
  "kind": "k8s.vgpu.hami.io/claim",
  "devices": [
    {{
      "name": "{UID}-gpu-0",
      "containerEdits": {{
        "env": [
          "NVIDIA_VISIBLE_DEVICES=GPU-1111",
          "CUDA_DEVICE_MEMORY_LIMIT_0=4096m",
          "CUDA_DEVICE_MEMORY_SHARED_CACHE={CACHE}/a.cache"
        ],
        "deviceNodes": [
          {{
            "path": "/dev/nvidia3"
          }}
        ],
        "mounts": [
          {{
            "hostPath": "{CACHE}",
            "containerPath": "{CACHE}",
            "options": [
              "rw",
              "nosuid",
              "nodev",
              "bind"
            ]
          }},
          {{
            "hostPath": "/usr/local/vgpu/libvgpu.so",
            "containerPath": "/usr/local/vgpu/libvgpu.so",
            "options": [
              "ro",
              "nosuid",
              "nodev",
              "bind"
            ]
          }}
        ]
      }}
    }}
  ],
  "containerEdits": {{
    "deviceNodes": [
      {{
        "path": "/dev/nvidiactl"
      }},
      {{
        "path": "/dev/nvidia-uvm"
      }},
      {{
        "path": "/dev/nvidia-uvm-tools"
      }}
    ]
  }}
}}
"""


def test_a_claim_with_one_device_gives_exactly_the_expected_json():
    spec = build_claim_spec(UID, [ClaimDeviceEdits("gpu-0", 3, EDITS)], host_nodes=HOST_NODES)
    assert spec.to_json() == EXPECTED_JSON
    assert [device.qualified_id for device in spec.devices] == [
        f"k8s.vgpu.hami.io/claim={UID}-gpu-0"
    ]
    validate_claim_spec(spec)


def test_without_device_nodes_only_libvgpus_edits_remain():
    spec = build_claim_spec(UID, [ClaimDeviceEdits("gpu-0", 3, EDITS)])
    document = json.loads(spec.to_json())
    assert "containerEdits" not in document
    edits = document["devices"][0]["containerEdits"]
    assert "deviceNodes" not in edits
    assert edits["env"][0] == "NVIDIA_VISIBLE_DEVICES=GPU-1111"
    assert len(edits["mounts"]) == 2
    validate_claim_spec(spec)


@pytest.mark.parametrize("share_id", [SHARE_A, "", None])
def test_a_single_share_keeps_the_short_name(share_id: str | None):
    spec = build_claim_spec(UID, [ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=share_id)])
    assert [device.name for device in spec.devices] == [f"{UID}-gpu-0"]


def test_two_shares_of_one_device_are_told_apart_by_share_id_in_result_order():
    spec = build_claim_spec(
        UID,
        [
            ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=SHARE_B),
            ClaimDeviceEdits("gpu-1", 1, EDITS),
            ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=SHARE_A),
        ],
        host_nodes=HOST_NODES,
    )
    assert [device.name for device in spec.devices] == [
        f"{UID}-gpu-0-{SHARE_B}",
        f"{UID}-gpu-1",
        f"{UID}-gpu-0-{SHARE_A}",
    ]
    assert [device.edits.device_nodes for device in spec.devices] == [
        (CdiDeviceNode("/dev/nvidia0", "/dev/nvidia0"),),
        (CdiDeviceNode("/dev/nvidia1", "/dev/nvidia1"),),
        (CdiDeviceNode("/dev/nvidia0", "/dev/nvidia0"),),
    ]
    validate_claim_spec(spec)


@pytest.mark.parametrize("missing", ["", None])
def test_repeated_device_without_share_id_is_refused(missing: str | None):
    with pytest.raises(InvalidCdiNameError) as caught:
        build_claim_spec(
            UID,
            [
                ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=SHARE_A),
                ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=missing),
            ],
        )
    assert caught.value.field == "shareID"


def test_a_name_two_results_would_share_is_refused_rather_than_aliased():
    with pytest.raises(InvalidCdiNameError) as caught:
        build_claim_spec(
            UID,
            [
                ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=SHARE_A),
                ClaimDeviceEdits("gpu-0", 0, EDITS, share_id=SHARE_B),
                ClaimDeviceEdits(f"gpu-0-{SHARE_A}", 1, EDITS),
            ],
        )
    assert caught.value.field == "devices"


@pytest.mark.parametrize("uid", ["../x", "a/b", "\x00", UID.upper()])
def test_a_hostile_claim_uid_is_refused(uid: str):
    with pytest.raises(InvalidCdiNameError) as caught:
        build_claim_spec(uid, [ClaimDeviceEdits("gpu-0", 0, EDITS)])
    assert caught.value.field == "claimUID"


@pytest.mark.parametrize(
    ("devices", "field"),
    [
        ([], "devices"),
        ([ClaimDeviceEdits("gpu_0", 0, EDITS)], "device"),
        ([ClaimDeviceEdits("gpu-0", 0, EDITS, share_id="1")], "shareID"),
        ([ClaimDeviceEdits("gpu-0", -1, EDITS)], "gpuMinor"),
        ([ClaimDeviceEdits("gpu-0", True, EDITS)], "gpuMinor"),
        ([ClaimDeviceEdits("gpu-0", 0, ContainerEdits((EnvVar("A=B", "c"),), ()))], "env"),
        ([ClaimDeviceEdits("gpu-0", 0, ContainerEdits((EnvVar("", "c"),), ()))], "env"),
        ([ClaimDeviceEdits("gpu-0", 0, ContainerEdits((EnvVar("A", "\0"),), ()))], "env"),
    ],
)
def test_bad_results_are_refused_naming_the_field(devices: list[ClaimDeviceEdits], field: str):
    with pytest.raises(InvalidParameterError) as caught:
        build_claim_spec(UID, devices)
    assert caught.value.field == field


def test_a_device_with_nothing_to_inject_is_refused():
    with pytest.raises(InvalidCdiSpecError) as caught:
        build_claim_spec(UID, [ClaimDeviceEdits("gpu-0", 0, ContainerEdits((), ()))])
    assert caught.value.field == "devices[0].containerEdits"


def test_building_twice_gives_the_same_bytes():
    devices = [ClaimDeviceEdits("gpu-1", 1, EDITS), ClaimDeviceEdits("gpu-0", 0, EDITS)]
    assert build_claim_spec(UID, devices).to_json() == build_claim_spec(UID, devices).to_json()


@pytest.mark.parametrize(
    ("uid", "required"),
    [(UID, "0.5.0"), ("a7f0c3a2-4b1d-4c8e-9a55-1e2f3a4b5c6d", "0.3.0")],
)
def test_the_declared_version_is_the_lowest_that_fits_every_claim_uid(uid: str, required: str):
    spec = build_claim_spec(uid, [ClaimDeviceEdits("gpu-0", 0, EDITS)])
    assert minimum_cdi_version(spec.to_document()) == required
    assert CDI_VERSION == "0.5.0"


def test_only_nodes_the_host_has_are_listed_with_their_host_path():
    """A runtime stats every node on the host: a missing one fails the container."""
    host_nodes = {"/dev/nvidiactl": "/host/dev/nvidiactl", "/dev/nvidia1": "/host/dev/nvidia1"}
    spec = build_claim_spec(
        UID,
        [ClaimDeviceEdits("gpu-0", 0, EDITS), ClaimDeviceEdits("gpu-1", 1, EDITS)],
        host_nodes=host_nodes,
    )
    document = spec.to_document()
    assert [d["containerEdits"].get("deviceNodes") for d in document["devices"]] == [
        None,
        [{"path": "/dev/nvidia1", "hostPath": "/host/dev/nvidia1"}],
    ]
    assert document["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidiactl", "hostPath": "/host/dev/nvidiactl"}
    ]
    validate_claim_spec(spec)
