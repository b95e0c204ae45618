"""A rolling upgrade from the previous release to the working tree, and a rollback.

Three nodes (two of shared A100s, one H100 in MIG mode) and the controller run the
previous release's own code (`git archive` of its tag) as processes against the API
emulator, with running pods: shares sized by capacity requests and by a `VGPUConfig`,
two shares on two cards, a MIG partition. Then each node's kubelet plugin, then the
controller, is replaced by the working tree's, one at a time, while new pods are
allocated and prepared between the steps; then one node's plugin and the controller go
back to the previous release. After every step:

- every running pod's claim prepares again to the same CDI device ids, and its CDI spec
  (limits env, cache file, MIG uuid, mounts) is the file it got at first, unchanged;
- nothing is allocated twice: no device past its shares, memory or cores, no MIG
  placement held twice (read with the current controller's inventory);
- nothing leaks: each node's CDI specs, cache dirs and checkpoint records are exactly
  those of the claims prepared there, so unprepare of a claim prepared by the other
  release removes all of its files.

Where the repository has no tag of an earlier release (a shallow or tagless clone) or
no git, the test is skipped saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from release_cluster import WAIT_S, Release, ReleaseCluster, release_cluster
from release_trees import (
    ReleaseTreeError,
    extract_release,
    previous_release_tag,
    release_version,
)
from upgrade_checks import usage_problems
from upgrade_cluster import (
    CLAIMS,
    DRIVER,
    PODS,
    SHARED_CLASS,
    claim_body,
    mig_gpus,
    partition,
    pod_body,
    prepare,
    run_pod,
    share,
    share_by_config,
    shared_gpus,
    unprepare,
)

from cdi.naming import spec_file_name
from dra_driver.kube.rest import object_path
from kubeletplugin.checkpoint import PrepareState

NAMESPACE = "default"
CURRENT = Release("working tree")
SHARED_NODES = ("node-0", "node-1")
MIG_NODE = "mig-0"
CONTROLLER_FLAGS = ("--node-scheduler-policy", "spread")
"""Spread pods over the shared nodes, so that each node's replacement meets claims."""


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Release:
    try:
        tag = previous_release_tag()
        tree = extract_release(tag, tmp_path_factory.mktemp("previous") / "tree")
    except ReleaseTreeError as error:
        pytest.skip(f"no earlier release to upgrade from: {error}")
    return Release(release_version(tree), tree)


@dataclass
class Placed:
    """A running pod's claim, and what it got when first prepared."""

    claim: dict[str, Any]
    node: str
    devices: list[dict[str, Any]]
    spec: dict[str, Any]
    shared: bool
    prepared_by: str
    """The release of the node's plugin that first prepared it."""

    @property
    def uid(self) -> str:
        return str(self.claim["metadata"]["uid"])


class Rollout:
    """The test's cluster and the pods running in it."""

    def __init__(self, cluster: ReleaseCluster, scratch: Path) -> None:
        self.cluster = cluster
        self.scratch = scratch
        self.running: dict[str, Placed] = {}

    async def place(self, name: str, request: dict[str, Any], config: Any = None) -> Placed:
        """A pod and its claim, allocated by the running controller and prepared on the
        node it names."""
        admin = self.cluster.admin
        body = claim_body(name, NAMESPACE, [request], [config] if config else None)
        claim = await admin.create(CLAIMS.format(namespace=NAMESPACE), body)
        pod = await admin.create(PODS.format(namespace=NAMESPACE), pod_body(name, NAMESPACE, name))
        controller = self.cluster.controller
        assert controller is not None
        node, devices = await controller.until(
            run_pod(admin, self.cluster.claims, self.cluster.kubelets, pod, claim, WAIT_S)
        )
        host = self.cluster.nodes[node]
        spec = json.loads((host.cdi_dir / spec_file_name(claim["metadata"]["uid"])).read_text())
        shared = request["exactly"]["deviceClassName"] == SHARED_CLASS
        assert host.plugin is not None
        placed = Placed(claim, node, devices, spec, shared, host.plugin.release.name)
        self.running[name] = placed
        return placed

    async def finish(self, name: str) -> None:
        """The pod ends: its claim is unprepared on its node; pod and claim are deleted."""
        placed = self.running.pop(name)
        await unprepare(self.cluster.nodes[placed.node].kubelet, placed.claim)
        await self.cluster.admin.delete(object_path(PODS.format(namespace=NAMESPACE), name))
        await self.cluster.admin.delete(object_path(CLAIMS.format(namespace=NAMESPACE), name))

    async def check(self, stage: str) -> None:
        await self._check_running_pods(stage)
        slices = (await self.cluster.admin.list("/apis/resource.k8s.io/v1/resourceslices"))["items"]
        claims = list(self.cluster.claims.store.values())
        assert usage_problems(slices, claims, DRIVER) == [], stage
        for name, node in self.cluster.nodes.items():
            ours = {p.uid: p for p in self.running.values() if p.node == name}
            specs = sorted(path.name for path in node.cdi_dir.iterdir())
            assert specs == sorted(spec_file_name(uid) for uid in ours), f"{stage}: {name}"
            cache_dirs = sorted(path.name for path in node.cache_dirs.glob("*"))
            shared = sorted(uid for uid, placed in ours.items() if placed.shared)
            assert cache_dirs == shared, f"{stage}: {name}'s cache dirs"
            records = node.checkpoint(self.scratch).claims
            assert sorted(records) == sorted(ours), f"{stage}: {name}'s checkpoint"
            assert all(r.state is PrepareState.COMPLETED for r in records.values()), stage

    async def _check_running_pods(self, stage: str) -> None:
        """kubelet's next prepare of every running claim (a container restart) gets what
        it got first, and the claim's CDI spec is still the file first written."""
        for name, placed in self.running.items():
            node = self.cluster.nodes[placed.node]
            assert node.plugin is not None
            again = await node.plugin.until(prepare(node.kubelet, placed.claim))
            assert again == placed.devices, f"{stage}: {name} prepared differently"
            spec = json.loads((node.cdi_dir / spec_file_name(placed.uid)).read_text())
            assert spec == placed.spec, f"{stage}: {name}'s CDI spec changed"


async def test_rolling_upgrade_and_rollback_keep_every_pod(
    previous: Release, tmp_path: Path
) -> None:
    async with release_cluster() as cluster:
        rollout = Rollout(cluster, tmp_path)
        for number, name in enumerate(SHARED_NODES):
            await cluster.add_node(name, shared_gpus(number), previous)
        await cluster.add_node(MIG_NODE, mig_gpus(0xB), previous)
        await cluster.run_controller(previous, *CONTROLLER_FLAGS)
        await rollout.place("infer", share("10Gi", "30"))
        await rollout.place("quarter", *share_by_config(memoryPercentage=25, cores=25))
        await rollout.place("train", share("20Gi", "50", count=2))
        await rollout.place("mig-3g", partition("3g.40gb"))
        assert {p.node for p in rollout.running.values()} == {*SHARED_NODES, MIG_NODE}
        await rollout.check(f"all {previous.name}")

        for number, name in enumerate((*SHARED_NODES, MIG_NODE)):
            await cluster.nodes[name].run(CURRENT)
            await rollout.check(f"{name}'s plugin upgraded")
            if name == MIG_NODE:
                await rollout.place("mig-1g", partition("1g.10gb"))
            else:
                await rollout.place(f"during-{number}", share("4Gi", "10"))
            await rollout.check(f"a pod placed after {name}'s upgrade")

        await cluster.run_controller(CURRENT, *CONTROLLER_FLAGS)
        await rollout.place("after-0", share("8Gi", "20"))
        await rollout.place("after-1", share("8Gi", "20"))
        await rollout.place("mig-2g", partition("2g.20gb"))
        await rollout.check("controller upgraded")
        for name in ("infer", "train", "mig-3g"):
            await rollout.finish(name)
        await rollout.check(f"claims prepared by {previous.name} unprepared by the upgrade")

        rolled_back = cluster.nodes[SHARED_NODES[1]]
        await rolled_back.run(previous)
        await rollout.check(f"{rolled_back.name}'s plugin rolled back")
        newer = [
            name
            for name, placed in rollout.running.items()
            if placed.node == rolled_back.name and placed.prepared_by == CURRENT.name
        ]
        assert newer, "the rolled-back node holds claims the upgrade prepared"
        await rollout.finish(newer[0])
        await cluster.run_controller(previous, *CONTROLLER_FLAGS)
        await rollout.place("rolled-back-0", share("2Gi", "10"))
        await rollout.place("rolled-back-1", share("2Gi", "10"))
        await rollout.check(f"controller and {rolled_back.name}'s plugin rolled back")
