"""HAMi's GPU pair scores (`hami.io/node-nvidia-score`) from the GPUs' links: the
score table of `calculate_score.go`, the asymmetric-pair rule, links read from the
mock file and from NVML (a fake pynvml with direct NVLinks, NVSwitch and PCIe)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from api.hami_annotations import decode_pair_scores
from dra_driver.errors import InvalidParameterError
from kubeletplugin.deviceplugin.devices import score_annotation, topology_scores
from kubeletplugin.gpu_topology import GpuLink, P2PLevel, pair_scores
from kubeletplugin.gpus import GpuInfo, MockBackend, NvmlBackend

GIB = 1 << 30


def gpu(uuid: str, index: int, *links: GpuLink) -> GpuInfo:
    return GpuInfo(uuid, index, index, "NVIDIA A100-SXM4-80GB", 80 * GIB, links=links)


def test_nvlink_counts_score_100_each_as_in_hamis_own_case() -> None:
    """HAMi's Test_calculateGPUScore: four GPUs, one or two NVLinks per pair."""
    counts = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (1, 2): 2, (1, 3): 1, (2, 3): 2}
    links = {
        f"gpu{i}": [
            GpuLink(f"gpu{j}", nvlinks=counts[(min(i, j), max(i, j))]) for j in range(4) if j != i
        ]
        for i in range(4)
    }
    result = pair_scores(links)
    assert result.scores == {
        "gpu0": {"gpu1": 100, "gpu2": 100, "gpu3": 200},
        "gpu1": {"gpu0": 100, "gpu2": 200, "gpu3": 100},
        "gpu2": {"gpu0": 100, "gpu1": 200, "gpu3": 200},
        "gpu3": {"gpu0": 200, "gpu1": 100, "gpu2": 200},
    }
    assert result.asymmetric == ()


@pytest.mark.parametrize(
    ("level", "score"),
    [
        (P2PLevel.INTERNAL, 60),
        (P2PLevel.SINGLE, 50),
        (P2PLevel.MULTIPLE, 40),
        (P2PLevel.HOSTBRIDGE, 30),
        (P2PLevel.NODE, 20),
        (P2PLevel.SYSTEM, 10),
    ],
)
def test_the_pcie_path_adds_its_level_to_the_nvlinks(level: P2PLevel, score: int) -> None:
    links = {"a": [GpuLink("b", level, 4)], "b": [GpuLink("a", level, 4)]}
    assert pair_scores(links).scores == {"a": {"b": score + 400}, "b": {"a": score + 400}}


def test_a_pair_whose_directions_disagree_scores_zero() -> None:
    """HAMi's Test_calculateGPUPairScore_asymmetric: NVLinks seen from one side only."""
    links = {
        "a": [GpuLink("b", P2PLevel.NODE, 4), GpuLink("c", P2PLevel.SYSTEM)],
        "b": [GpuLink("a", P2PLevel.NODE)],
        "c": [GpuLink("a", P2PLevel.SYSTEM)],
    }
    result = pair_scores(links)
    assert result.scores["a"] == {"b": 0, "c": 10}
    assert result.scores["b"] == {"a": 0, "c": 0}
    assert result.asymmetric == (("a", "b"), ("b", "a"))


def test_only_registered_gpus_are_scored_in_register_order() -> None:
    gpus = [
        gpu("GPU-b", 1, GpuLink("GPU-a", nvlinks=2), GpuLink("GPU-filtered", nvlinks=8)),
        gpu("GPU-a", 0, GpuLink("GPU-b", nvlinks=2)),
    ]
    scores = topology_scores(gpus)
    assert scores is not None
    assert score_annotation(scores) == (
        '[{"uuid":"GPU-a","score":{"GPU-b":200}},{"uuid":"GPU-b","score":{"GPU-a":200}}]'
    )


def test_gpus_without_links_publish_no_score() -> None:
    assert topology_scores([gpu("GPU-a", 0), gpu("GPU-b", 1)]) is None
    assert score_annotation(None) is None


MOCK_WITH_LINKS = """
gpus:
  - uuid: GPU-a
    index: 0
    links: [{peer: GPU-b, p2p: single, nvlinks: 12}, {peer: GPU-c, p2p: system}]
  - uuid: GPU-b
    index: 1
    links: [{peer: GPU-a, p2p: single, nvlinks: 12}]
  - {uuid: GPU-c, index: 2}
"""


def test_the_mock_file_carries_the_links(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(MOCK_WITH_LINKS)
    a, b, c = MockBackend(path).discover()
    assert a.links == (GpuLink("GPU-b", P2PLevel.SINGLE, 12), GpuLink("GPU-c", P2PLevel.SYSTEM))
    assert b.links == (GpuLink("GPU-a", P2PLevel.SINGLE, 12),)
    assert c.links == ()
    scores = decode_pair_scores(score_annotation(topology_scores([a, b, c])) or "")
    assert scores == {
        "GPU-a": {"GPU-b": 1250, "GPU-c": 0},
        "GPU-b": {"GPU-a": 1250, "GPU-c": 0},
        "GPU-c": {"GPU-a": 0, "GPU-b": 0},
    }


@pytest.mark.parametrize(
    ("link", "reason"),
    [("{peer: GPU-b, p2p: pix}", "p2p"), ("{peer: GPU-b, nvlinks: 19}", "nvlinks")],
)
def test_a_bad_mock_link_names_its_field(tmp_path: Path, link: str, reason: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(f"gpus:\n  - {{uuid: GPU-a, index: 0, links: [{link}]}}\n")
    with pytest.raises(InvalidParameterError, match=reason):
        MockBackend(path).discover()


class FakeNvmlError(Exception):
    pass


def fake_nvml(
    buses: list[str],
    ancestors: dict[tuple[int, int], int],
    nvlinks: dict[int, list[tuple[str, int]]],
) -> types.ModuleType:
    """pynvml with `len(buses)` GPUs; `nvlinks[i]` lists GPU i's enabled links as
    (remote bus ID, remote device type); other link numbers are not supported."""
    module = types.ModuleType("pynvml")
    module.NVMLError = FakeNvmlError
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: None
    module.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    module.nvmlSystemGetCudaDriverVersion = lambda: 12080
    module.nvmlDeviceGetCount = lambda: len(buses)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    module.nvmlDeviceGetMinorNumber = lambda h: h
    module.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * GIB)
    module.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=buses[h].encode())
    module.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    module.nvmlDeviceGetNumaNodeId = lambda h: 0

    def ancestor(first: int, second: int) -> int:
        key = (min(first, second), max(first, second))
        if key not in ancestors:
            raise FakeNvmlError("not supported")
        return ancestors[key]

    def link_of(handle: int, link: int) -> tuple[str, int]:
        if link >= len(nvlinks.get(handle, [])):
            raise FakeNvmlError("invalid argument")
        return nvlinks[handle][link]

    module.nvmlDeviceGetTopologyCommonAncestor = ancestor

    def state(handle: int, link: int) -> int:
        link_of(handle, link)
        return 1  # NVML_FEATURE_ENABLED

    module.nvmlDeviceGetNvLinkState = state
    module.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(
        busId=link_of(h, link)[0].encode()
    )
    module.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: link_of(h, link)[1]
    return module


GPU_TYPE, SWITCH_TYPE = 0, 2
BUSES = ["00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0", "00000000:9D:00.0"]


def discover(nvml: Any, read_topology: bool = True) -> dict[str, tuple[GpuLink, ...]]:
    return {g.uuid: g.links for g in NvmlBackend(nvml, read_topology=read_topology).discover()}


def test_nvml_direct_nvlinks_are_counted_per_peer_bus_id() -> None:
    """GPUs 0 and 1 bridged by two NVLinks (remote bus IDs in lower case, as some
    drivers write them), on one PCIe switch; GPU 2 across the CPUs."""
    nvml = fake_nvml(
        BUSES[:3],
        {(0, 1): 10, (0, 2): 50, (1, 2): 50},
        {0: [(BUSES[1].lower(), GPU_TYPE)] * 2, 1: [(BUSES[0], GPU_TYPE)] * 2},
    )
    links = discover(nvml)
    assert links["GPU-0"] == (
        GpuLink("GPU-1", P2PLevel.SINGLE, 2),
        GpuLink("GPU-2", P2PLevel.SYSTEM, 0),
    )
    assert links["GPU-2"] == (
        GpuLink("GPU-0", P2PLevel.SYSTEM, 0),
        GpuLink("GPU-1", P2PLevel.SYSTEM, 0),
    )


def test_nvml_nvswitch_links_count_the_fewer_of_both_gpus() -> None:
    switch = "00000000:C1:00.0"
    nvml = fake_nvml(
        BUSES,
        {(i, j): 40 for i in range(4) for j in range(i + 1, 4)},
        {
            0: [(switch, SWITCH_TYPE)] * 18,
            1: [(switch, SWITCH_TYPE)] * 18,
            2: [(switch, SWITCH_TYPE)] * 12,
        },
    )
    links = discover(nvml)
    assert links["GPU-0"] == (
        GpuLink("GPU-1", P2PLevel.NODE, 18),
        GpuLink("GPU-2", P2PLevel.NODE, 12),
        GpuLink("GPU-3", P2PLevel.NODE, 0),
    )


def test_nvml_without_topology_support_leaves_the_links_unknown() -> None:
    links = discover(fake_nvml(BUSES[:2], {}, {}))
    assert links["GPU-0"] == (GpuLink("GPU-1", None, 0),)


def test_nvml_topology_is_read_only_when_asked() -> None:
    nvml = fake_nvml(BUSES[:2], {(0, 1): 10}, {})
    assert discover(nvml, read_topology=False) == {"GPU-0": (), "GPU-1": ()}
