"""The simulator's MIG node: where it sits in the cluster, what its mock cards are, the
modes that have it, and the default DRA run showing a MIG partition (the bundled
`mig-partition-3g` pod: a 3g.40gb of an H100 on `sim-mig-0`, placement 4, HAMi's
preference of 3g from the highest start, prepared as its MIG instance) beside the
HAMi-core shares of the other examples."""

from __future__ import annotations

import json

from simulate_patience import PATIENT

from dra_driver.cli import main
from dra_driver.objects.mig_profiles import H100_80GB, mig_card
from simulator.nodes import family_gpu_file
from simulator.settings import ClusterShape


def test_the_mig_node_comes_last_and_keeps_the_other_nodes_places() -> None:
    without = ClusterShape(vendors=("nvidia", "amd")).family_nodes()
    shape = ClusterShape(vendors=("nvidia", "amd"), mig_nodes=1)
    nodes = shape.family_nodes()
    assert nodes[: len(without)] == without
    (mig,) = nodes[len(without) :]
    assert (mig.name, mig.vendor, mig.position) == ("sim-mig-0", "nvidia", len(without))
    assert ClusterShape(vendors=("amd",), mig_nodes=1).family_nodes()[-1].name == "sim-amd-0"


def test_its_cards_are_h100s_in_mig_mode_with_no_instance_yet() -> None:
    shape = ClusterShape(vendors=("nvidia",), mig_nodes=1)
    cards = family_gpu_file(shape, shape.family_nodes()[-1])["gpus"]
    assert len(cards) == shape.mig_gpus_per_node == 2
    for card in cards:
        assert card["mig"] == {"mode": "enabled"}
        assert mig_card(card["productName"], card["memory"]) is H100_80GB
    assert len({card["uuid"] for card in cards}) == 2


def test_mig_nodes_are_refused_outside_the_dra_modes(capsys) -> None:
    assert main(["simulate", "--mode", "legacy", "--mig-nodes", "1"]) == 2
    assert "--mig-nodes" in capsys.readouterr().err


def test_the_default_run_shows_a_partition_and_shares_side_by_side(capsys) -> None:
    status = main(["simulate", *PATIENT, "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    pods = {pod["name"]: pod for pod in report["pods"]}

    partitioned = pods["mig-3g"]
    assert (partitioned["phase"], partitioned["node"]) == ("Running", "sim-mig-0")
    (partition,) = partitioned["partitions"]
    assert (partition["profile"], partition["placementStart"], partition["placementSize"]) == (
        "3g.40gb",
        4,
        4,
    )
    assert partition["device"] == "gpu-0-mig-3g-40gb-at-4"
    assert partition["gpuUuid"].startswith("GPU-")
    env = partitioned["containers"]["trainer"]["env"]
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert not any(name.startswith("CUDA_DEVICE_MEMORY_LIMIT") for name in env)

    shared = pods["inference"]
    assert shared["phase"] == "Running" and shared["node"].startswith("sim-node-")
    assert shared["partitions"] == []
    assert shared["containers"]["server"]["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
