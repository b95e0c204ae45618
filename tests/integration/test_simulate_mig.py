"""The simulator's MIG node: where it sits in the cluster, what its mock cards are, and
the modes that have it."""

from __future__ import annotations

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
