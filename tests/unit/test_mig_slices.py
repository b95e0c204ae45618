"""MIG-mode cards as DRA partitionable devices: the slices built from the mock backend.

The expected placements are NVIDIA's (`nvidia-smi mig -lgipp`, the MIG user guide),
as `dra_driver/objects/mig_profiles.py` tables them: per H100/H200 card 7 (1g) + 7
(1g+me, any one slice, one instance) + 4 (1g two memory slices) + 3 (2g) + 2 (3g) +
1 (4g) + 1 (7g) = 25 profile placements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.objects.dra_cel import cel_device_from_slice, compile_selector
from dra_driver.objects.mig_devices import (
    PARTITION_CLASS,
    counter_set_name,
    partition_consumption,
)
from dra_driver.objects.mig_profiles import H100_80GB, Placement
from kubeletplugin.gpus import GpuInfo, MockBackend
from kubeletplugin.mig_slices import is_shared, withheld_reason, without_instances
from kubeletplugin.mig_state import MigState
from kubeletplugin.plugin import device_capacities
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ROOT / "deploy" / "components" / "kubelet-plugin" / "deviceclasses.yaml"
DRIVER = "vgpu.hami.io"
TAINT = Taint("vgpu.hami.io/allocation", "controller")
CONTROLLER = SliceSettings(allocation_taint=TAINT)
H100 = {"productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"}
H200 = {"productName": "NVIDIA H200", "memory": "141Gi"}
PLACEMENTS_PER_CARD = 25


def card(index: int, model: dict[str, str], mig: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"uuid": f"GPU-{index:04d}", "index": index, **model}
    if mig is not None:
        entry["mig"] = mig
    return entry


def discover(tmp_path: Path, *cards: dict[str, Any]) -> list[GpuInfo]:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"gpus": list(cards)}))
    return list(MockBackend(path).discover())


def build(gpus: list[GpuInfo], settings: SliceSettings = CONTROLLER) -> list[dict[str, Any]]:
    return build_resource_slices("node-a", "uid-a", gpus, settings, 1)


def devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}


def counter_sets(slices: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    return {
        c["name"]: {k: int(v["value"]) for k, v in c["counters"].items()}
        for s in slices
        for c in s["spec"].get("sharedCounters") or []
    }


def selector(name: str) -> Any:
    documents = [d for d in yaml.safe_load_all(CLASSES.read_text()) if d]
    (found,) = [d for d in documents if d["metadata"]["name"] == name]
    return compile_selector(found["spec"]["selectors"][0]["cel"]["expression"])


def test_h200_node_of_eight_cards_fits_the_api_limits(tmp_path: Path) -> None:
    gpus = discover(tmp_path, *(card(i, H200, {"mode": "enabled"}) for i in range(8)))
    slices = build(gpus)
    with_devices = [s for s in slices if "devices" in s["spec"]]
    with_counters = [s for s in slices if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["devices"]) for s in with_devices] == [50, 50, 50, 50]
    assert [len(s["spec"]["sharedCounters"]) for s in with_counters] == [8]
    assert len(slices) == 5
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {5}
    assert not [s for s in slices if "devices" in s["spec"] and "sharedCounters" in s["spec"]]
    # 8 memory slices + compute + media extensions per set: within the API's 32.
    assert {len(c["counters"]) for c in with_counters[0]["spec"]["sharedCounters"]} == {10}
    published = devices(slices)
    assert len(published) == 8 * PLACEMENTS_PER_CARD == 200
    assert {len(d["consumesCounters"]) for d in published.values()} == {1}
    # Whole cards per slice: each card's partitions sit in one slice.
    for s in with_devices:
        parents = [d["attributes"]["parentIndex"]["int"] for d in s["spec"]["devices"]]
        assert len(parents) == PLACEMENTS_PER_CARD * len(set(parents))


def test_h100_partition_device_carries_profile_placement_and_consumption(tmp_path: Path) -> None:
    gpus = discover(tmp_path, card(0, H100, {"mode": "enabled"}))
    slices = build(gpus)
    published = devices(slices)
    assert len(published) == PLACEMENTS_PER_CARD
    device = published["gpu-0-mig-3g-40gb-at-4"]
    profile = H100_80GB.profile("3g.40gb")
    assert profile is not None
    assert device["attributes"] == {
        "vendor": {"string": "NVIDIA"},
        "type": {"string": "NVIDIA-H100-80GB-HBM3"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "numa": {"int": 0},
        "driverVersion": {"version": "550.54.15"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "kind": {"string": "mig"},
        "profile": {"string": "3g.40gb"},
        "parentUUID": {"string": "GPU-0000"},
        "parentIndex": {"int": 0},
        "placementStart": {"int": 4},
        "placementSize": {"int": 4},
        "computeSlices": {"int": 3},
        "memorySlices": {"int": 4},
        "multiprocessors": {"int": 60},
    }
    # 39.50 GiB, as `nvidia-smi mig -lgip` prints the H100 3g.40gb.
    assert device["capacity"] == {"memory": {"value": str(40448 << 20)}}
    assert device["consumesCounters"] == [
        {
            "counterSet": "gpu-0-mig-counters",
            "counters": {
                k: {"value": str(v)}
                for k, v in partition_consumption(profile, Placement(4, 4)).items()
            },
        }
    ]
    assert "allowMultipleAllocations" not in device
    assert device["taints"] == [{"key": TAINT.key, "value": TAINT.value, "effect": "NoSchedule"}]
    assert "gpu-0" not in published, "a partitioned card is never also a share"
    assert counter_sets(slices) == {
        "gpu-0-mig-counters": {
            **{f"memory-slice-{i}": 1 for i in range(8)},
            "compute-slices": 7,
            "media-extensions": 1,
        }
    }


def test_static_instance_hides_overlapping_placements_and_its_counters(tmp_path: Path) -> None:
    mig = {"mode": "enabled", "instances": [{"profile": "3g.40gb", "start": 4}]}
    slices = build(discover(tmp_path, card(0, H100, mig)))
    names = set(devices(slices))
    for name in (
        "gpu-0-mig-3g-40gb-at-4",
        "gpu-0-mig-7g-80gb-at-0",
        "gpu-0-mig-1g-10gb-at-4",
        "gpu-0-mig-1g-10gb-at-6",
        "gpu-0-mig-2g-20gb-at-4",
        "gpu-0-mig-1g-20gb-at-6",
    ):
        assert name not in names
    for name in ("gpu-0-mig-4g-40gb-at-0", "gpu-0-mig-3g-40gb-at-0", "gpu-0-mig-1g-10gb-at-3"):
        assert name in names
    # 1g x 4 + 1g+me x 4 + 1g.20gb x 2 + 2g x 2 + 3g at 0 + 4g at 0 = 14
    assert len(names) == 14
    counters = counter_sets(slices)[counter_set_name(0)]
    assert [counters[f"memory-slice-{i}"] for i in range(8)] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert counters["compute-slices"] == 4


def test_static_media_extension_instance_hides_every_other_me_placement(tmp_path: Path) -> None:
    mig = {"mode": "enabled", "instances": [{"profile": "1g.10gb+me", "start": 0}]}
    names = set(devices(build(discover(tmp_path, card(0, H100, mig)))))
    assert not [n for n in names if "-me-" in n]
    assert "gpu-0-mig-1g-10gb-at-1" in names


def test_own_instances_stay_offered(tmp_path: Path) -> None:
    mig = {"mode": "enabled", "instances": [{"profile": "3g.40gb", "start": 4}]}
    gpus = discover(tmp_path, card(0, H100, mig))
    mine = without_instances(gpus, {"GPU-0000": {Placement(4, 4)}})
    assert len(devices(build(list(mine)))) == PLACEMENTS_PER_CARD
    assert without_instances(gpus, {"GPU-other": {Placement(4, 4)}}) == tuple(gpus)


@pytest.mark.parametrize(
    ("mode", "pending", "becomes"),
    [("enabled", "disabled", "disabled"), ("disabled", "enabled", "enabled")],
)
def test_card_pending_a_reset_publishes_nothing(
    tmp_path: Path, mode: str, pending: str, becomes: str
) -> None:
    gpus = discover(tmp_path, card(0, H100, {"mode": mode, "pending": pending}), card(1, H100))
    slices = build(gpus)
    assert set(devices(slices)) == {"gpu-1"}
    assert counter_sets(slices) == {}
    reason = withheld_reason(gpus[0])
    assert reason is not None
    assert reason.startswith(f"GPU 0 (GPU-0000): MIG mode is {mode} and becomes {becomes}")


def test_mig_mode_without_profiles_publishes_nothing() -> None:
    gpu = GpuInfo(
        "GPU-x",
        0,
        0,
        "NVIDIA H100 80GB HBM3",
        80 << 30,
        mig=MigState(capable=True, enabled=True, pending_enabled=True),
    )
    assert build([gpu])[0]["spec"] == {
        "driver": DRIVER,
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "devices": [],
    }
    assert "no GPU-instance profile could be read" in (withheld_reason(gpu) or "")


def test_non_mig_card_publishes_as_before(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "off").mkdir()
    (plain,) = discover(tmp_path / "plain", card(0, H100))
    (disabled,) = discover(tmp_path / "off", card(0, H100, {"mode": "disabled"}))
    assert disabled.mig.capable and is_shared(plain) and is_shared(disabled)
    (first,) = build([plain])
    assert build([disabled]) == [first]
    (device,) = first["spec"]["devices"]
    assert device["name"] == "gpu-0" and device["allowMultipleAllocations"] is True
    assert device["attributes"]["kind"] == {"string": "share"}
    assert set(device["capacity"]) == {"memory", "cores", "shares"}


def test_classes_split_shares_from_partitions(tmp_path: Path) -> None:
    gpus = discover(tmp_path, card(0, H100, {"mode": "enabled"}), card(1, H100))
    slices = build(gpus)
    assert ["devices" in s["spec"] for s in slices] == [True, True, False]
    assert [d["name"] for d in slices[0]["spec"]["devices"]] == ["gpu-1"]
    shares, partitions = selector("nvidia.vgpu.hami.io"), selector(PARTITION_CLASS)
    for name, device in devices(slices).items():
        seen = cel_device_from_slice(DRIVER, device)
        assert shares.matches(seen) is (name == "gpu-1"), name
        assert partitions.matches(seen) is (name != "gpu-1"), name


def test_prepare_knows_only_shared_cards(tmp_path: Path) -> None:
    gpus = discover(
        tmp_path,
        card(0, H100, {"mode": "enabled"}),
        card(1, H100),
        card(2, H100, {"mode": "enabled", "pending": "disabled"}),
    )
    assert set(device_capacities(gpus, CONTROLLER)) == {"gpu-1"}
