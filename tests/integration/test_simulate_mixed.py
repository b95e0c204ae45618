"""`dra-driver simulate --mode mixed`: the bundled examples/mixed (team-a's namespace
migrated through /migrate, team-b's pods legacy) on the same NVIDIA GPUs, one bar per
card with both modes' holders, and no card over its memory, cores or slots, whether the
pods all fit (the default cluster) or not (one card: the extender counts the claims)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from simulate_patience import PATIENT

from dra_driver.cli import main

DRA, LEGACY = "dra", "legacy"
TRAINERS = {f"trainer-{i}" for i in range(4)}
INFERENCE = {f"inference-{i}" for i in range(4)}


def simulate(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["simulate", *PATIENT, "--mode", "mixed", *args, "-o", "json"])
    report = json.loads(out.getvalue())
    report["exit"] = status
    return report


@pytest.fixture(scope="module")
def default_run() -> dict:
    """The default mixed run: 3 NVIDIA nodes of 4 cards, examples/mixed."""
    return simulate()


@pytest.fixture(scope="module")
def one_card_run() -> dict:
    """examples/mixed on a single card: room for two trainers, then for nothing more."""
    return simulate("--nodes", "1", "--gpus-per-node", "1")


def pods(report: dict) -> dict[str, dict]:
    return {pod["name"]: pod for pod in report["pods"]}


def test_every_pod_runs_and_the_run_exits_0(default_run) -> None:
    found = pods(default_run)
    assert default_run["exit"] == 0
    assert default_run["mode"] == "mixed"
    assert set(found) == TRAINERS | INFERENCE
    assert {name for name, pod in found.items() if pod["phase"] != "Running"} == set()


def test_team_a_went_through_migrate_and_team_b_stayed_legacy(default_run) -> None:
    found = pods(default_run)
    for name in TRAINERS:
        # A claim from the template /migrate wrote, prepared by the kubelet plugin.
        assert found[name]["namespace"] == "team-a"
        assert found[name]["claims"] and found[name]["specFiles"]
        assert found[name]["devices"] == []
    for name in INFERENCE:
        assert found[name]["namespace"] == "team-b"
        assert found[name]["claims"] == {}
        assert [device["vendor"] for device in found[name]["devices"]] == ["NVIDIA"]


def test_cards_hold_both_modes_on_one_bar(default_run) -> None:
    gpus = default_run["gpus"]
    # One entry per card: the slice device and the register entry are merged.
    assert len(gpus) == len({(gpu["node"], gpu["uuid"]) for gpu in gpus}) == 12
    shared = [gpu for gpu in gpus if {s["mode"] for s in gpu["shares"]} == {DRA, LEGACY}]
    assert shared, "no card holds a claim and a legacy pod"
    held = {share["pods"][0] for gpu in shared for share in gpu["shares"]}
    assert held == TRAINERS | INFERENCE


@pytest.mark.parametrize("run", ["default_run", "one_card_run"])
def test_no_card_is_over_committed(run, request) -> None:
    report = request.getfixturevalue(run)
    for gpu in report["gpus"]:
        memory = sum(share["memoryBytes"] for share in gpu["shares"])
        cores = sum(share["cores"] for share in gpu["shares"])
        where = f"{gpu['node']}/{gpu['device']}"
        assert memory <= gpu["memoryBytes"], where
        assert cores <= gpu["cores"], where
        assert len(gpu["shares"]) <= gpu["sharesTotal"], where


def test_on_one_card_the_legacy_pods_meet_the_claims_and_are_refused(one_card_run) -> None:
    found = pods(one_card_run)
    assert one_card_run["exit"] == 0
    running = {name for name, pod in found.items() if pod["phase"] == "Running"}
    # Two trainers fill 60000 MiB and 80% of the card; a third would need 90000 MiB.
    assert len(running) == 2 and running <= TRAINERS
    for name in TRAINERS - running:
        assert found[name]["reason"].startswith("FilteringFailed:")
    # 50000 MiB would fit the empty card; with the claims counted it does not.
    for name in INFERENCE:
        assert "CardInsufficientMemory" in found[name]["reason"], found[name]["reason"]
    ((gpu,),) = [one_card_run["gpus"]]
    assert [share["mode"] for share in gpu["shares"]] == [DRA, DRA]
