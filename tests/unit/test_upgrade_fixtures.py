"""What every earlier release wrote (tests/fixtures/upgrade/<release>/) is read by this one.

Each recording holds a release's kubelet plugin checkpoints and journal, CDI specs and
cache dir names, the device plugin's Allocate answers, and the API objects it left
(claims with their status, slices, pods with HAMi's annotations, nodes). Here the
current code decodes each with its own readers and checks that they agree with each
other: the checkpoint (journal replayed) holds exactly the claims the API allocated to
the node, each with the devices, share ids and limits the current planner reads from
the claim; the CDI specs validate, name the devices the checkpoint recorded under the
names the current code gives them, and carry those limits and the cache file; the
controller's inventory reads the slices and claims with no device over capacity and no
MIG placement twice; HAMi's annotations decode and fit the registered cards. A release
that stops reading what an earlier one wrote fails here.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from upgrade_checks import usage_problems

from api.hami_annotations import (
    BIND_PHASE,
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    BindPhase,
    decode_node_devices,
    decode_pod_devices,
)
from api.quantity import MIB
from cdi.naming import cdi_device_name, qualified_device_id, spec_file_name
from cdi.validate import validate_spec_document
from controller.object_state import allocated_node
from dra_driver.objects.pod_claims import reserving_pods
from kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PrepareState,
    decode_checkpoint,
)
from kubeletplugin.gpu_sources import open_gpu_backend
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.mig_plan import plan_partitions
from kubeletplugin.plugin import device_capacities
from kubeletplugin.prepare_plan import plan_claim
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_paths import claim_cache_location, legacy_cache_location
from libvgpu.container_edits import encode_core_limit, encode_memory_limit
from libvgpu.settings import LibvgpuPaths

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
RECORDINGS = sorted(path for path in FIXTURES.iterdir() if (path / "manifest.json").is_file())
FIRST_RECORDED = "0.1.0"


@dataclass(frozen=True)
class Recording:
    root: Path

    @functools.cached_property
    def manifest(self) -> dict[str, Any]:
        return self.read("manifest.json")

    def read(self, name: str) -> Any:
        return json.loads((self.root / name).read_text())

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return self.read(f"api/{kind}.json")

    @property
    def driver(self) -> str:
        return str(self.manifest["driver"])

    def node(self, name: str) -> Path:
        return self.root / "nodes" / name

    def host_dir(self, node: str) -> Path:
        """Where the node's host files were when the release wrote them."""
        return Path(self.manifest["host_root"]) / node

    def libvgpu_paths(self, node: str) -> LibvgpuPaths:
        """The paths the node's plugin ran with (`install_libvgpu_files`' layout)."""
        vgpu = str(self.host_dir(node) / "vgpu")
        return LibvgpuPaths(host_dir=vgpu, cache_root=vgpu, lock_dir=str(self.host_dir(node)))

    def gpus(self, node: str) -> tuple[GpuInfo, ...]:
        return tuple(open_gpu_backend(self.node(node) / "gpus.yaml").discover())

    def host_files(self, node: str) -> dict[str, list[str]]:
        return self.read(f"nodes/{node}/host-files.json")

    def claims_on(self, node: str) -> dict[str, dict[str, Any]]:
        """The claims allocated to the node, by uid."""
        return {
            c["metadata"]["uid"]: c
            for c in self.objects("resourceclaims")
            if allocated_node(c) == node
        }

    def cdi_specs(self, node: str) -> dict[str, dict[str, Any]]:
        return {
            path.name: json.loads(path.read_text())
            for path in sorted((self.node(node) / "cdi").iterdir())
        }


def _cases() -> list[tuple[Recording, str]]:
    found = []
    for root in RECORDINGS:
        recording = Recording(root)
        found += [(recording, node) for node in recording.manifest["dra_nodes"]]
    return found


NODE_CASES = _cases()
NODE_IDS = [f"{recording.root.name}-{node}" for recording, node in NODE_CASES]


@pytest.fixture(params=RECORDINGS, ids=[path.name for path in RECORDINGS])
def recording(request: pytest.FixtureRequest) -> Recording:
    return Recording(request.param)


def load_checkpoint(recording: Recording, node: str, tmp_path: Path) -> Checkpoint:
    """The node's checkpoint as the current plugin loads it (journal replayed), from a copy:
    a load may tidy its directory."""
    state = tmp_path / node / "state"
    state.mkdir(parents=True)
    entry = recording.manifest["dra_nodes"][node]
    for name in filter(None, (entry["checkpoint"], entry["journal"])):
        shutil.copyfile(recording.node(node) / name, state / name)
    return CheckpointFile(state / entry["checkpoint"], entry["boot_id"]).load()


def test_the_first_release_is_recorded_with_a_journal() -> None:
    assert FIRST_RECORDED in [path.name for path in RECORDINGS]
    first = Recording(FIXTURES / FIRST_RECORDED)
    assert any(node["journal"] for node in first.manifest["dra_nodes"].values())


@pytest.mark.parametrize(("recording", "node"), NODE_CASES, ids=NODE_IDS)
def test_journal_replays_onto_its_snapshot(recording: Recording, node: str, tmp_path) -> None:
    """Every record loads completed; where the node kept a journal, the snapshot alone
    holds other claims than snapshot + journal (the short-lived ones, since unprepared)."""
    entry = recording.manifest["dra_nodes"][node]
    loaded = load_checkpoint(recording, node, tmp_path)
    assert loaded.boot_id == entry["boot_id"]
    assert loaded.claims, "a recorded node holds prepared claims"
    assert all(r.state is PrepareState.COMPLETED for r in loaded.claims.values())
    snapshot = decode_checkpoint((recording.node(node) / entry["checkpoint"]).read_bytes())
    if entry["journal"] is None:
        assert snapshot.claims == loaded.claims
        return
    gone = set(snapshot.claims) - set(loaded.claims)
    assert len(gone) == recording.manifest["short_lived_claims"] - 1
    assert set(loaded.claims) - set(snapshot.claims) == set(loaded.claims)


@pytest.mark.parametrize(("recording", "node"), NODE_CASES, ids=NODE_IDS)
def test_checkpoint_holds_the_claims_the_api_allocated_here(
    recording: Recording, node: str, tmp_path
) -> None:
    records = load_checkpoint(recording, node, tmp_path).claims
    claims = recording.claims_on(node)
    answers = recording.read("prepare-responses.json")
    pods = {(p["metadata"]["name"], p["metadata"]["uid"]) for p in recording.objects("pods")}
    assert set(records) == set(claims)
    for uid, record in records.items():
        claim = claims[uid]
        assert (record.namespace, record.name) == (
            claim["metadata"]["namespace"],
            claim["metadata"]["name"],
        )
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(d.pool_name, d.device_name, d.share_id) for d in record.devices] == [
            (r["pool"], r["device"], r.get("shareID", "")) for r in results
        ]
        namespace = claim["metadata"]["namespace"]
        reserving = reserving_pods(claim)
        assert set(record.pods) == {f"{namespace}/{p.name}" for p in reserving}
        assert {(p.name, p.uid) for p in reserving} <= pods
        kubelet_got = answers[uid]["devices"]
        assert [tuple(d.cdi_device_ids) for d in record.devices] == [
            tuple(d["cdi_device_ids"]) for d in kubelet_got
        ]


@pytest.mark.parametrize(("recording", "node"), NODE_CASES, ids=NODE_IDS)
def test_current_planner_reads_the_recorded_limits_from_each_claim(
    recording: Recording, node: str, tmp_path
) -> None:
    """A re-prepare by this release would give each old claim what the old one did."""
    records = load_checkpoint(recording, node, tmp_path).claims
    claims = recording.claims_on(node)
    gpus = recording.gpus(node)
    capacities = device_capacities(gpus, SliceSettings(driver=recording.driver))
    for uid, record in records.items():
        partitions = plan_partitions(claims[uid], driver=recording.driver, pool=node, gpus=gpus)
        if record.mig:
            assert partitions is not None
            assert [
                (g.gpu.uuid, g.profile.name, g.placement.start, g.placement.size)
                for g in partitions.grants
            ] == [(m.gpu_uuid, m.profile, m.start, m.size) for m in record.mig]
            assert all(m.created and m.mig_uuid for m in record.mig)
            continue
        assert partitions is None
        plan = plan_claim(claims[uid], driver=recording.driver, pool=node, devices=capacities)
        assert [
            (g.device, g.share_id, g.gpu.uuid, g.memory_limit_bytes, g.core_limit)
            for g in plan.grants
        ] == [
            (d.device_name, d.share_id, d.uuid, d.memory_limit_bytes, d.core_limit)
            for d in record.devices
        ]


@pytest.mark.parametrize(("recording", "node"), NODE_CASES, ids=NODE_IDS)
def test_cdi_specs_validate_and_name_what_the_checkpoint_recorded(
    recording: Recording, node: str, tmp_path
) -> None:
    records = load_checkpoint(recording, node, tmp_path).claims
    specs = recording.cdi_specs(node)
    assert set(specs) == {spec_file_name(uid) for uid in records}
    assert recording.host_files(node)["cdi"] == sorted(specs)
    for uid, record in records.items():
        spec = specs[spec_file_name(uid)]
        validate_spec_document(spec)
        names = [device["name"] for device in spec["devices"]]
        expected = [cdi_device_name(uid, d.device_name) for d in record.devices]
        assert sorted(names) == sorted(expected)
        assert [d.cdi_device_ids for d in record.devices] == [
            (qualified_device_id(name),) for name in expected
        ]


def _env(entries: list[str]) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in entries)


@pytest.mark.parametrize(("recording", "node"), NODE_CASES, ids=NODE_IDS)
def test_cdi_specs_carry_the_recorded_limits_cache_file_and_instances(
    recording: Recording, node: str, tmp_path
) -> None:
    """Each share's memory and SM limit at its ordinal (cards in index order), the claim's
    cache file where the current code would put it, its cache dir on the host; a MIG
    partition's instance by its MIG uuid, with no libvgpu and no cache dir."""
    records = load_checkpoint(recording, node, tmp_path).claims
    specs = recording.cdi_specs(node)
    index = {gpu.uuid: gpu.index for gpu in recording.gpus(node)}
    paths = recording.libvgpu_paths(node)
    cache_dirs = set()
    for uid, record in records.items():
        spec = specs[spec_file_name(uid)]
        common = _env((spec.get("containerEdits") or {}).get("env") or [])
        by_name = {d["name"]: _env(d["containerEdits"].get("env") or []) for d in spec["devices"]}
        if record.mig:
            for device, made in zip(record.devices, record.mig, strict=True):
                own = by_name[cdi_device_name(uid, device.device_name)]
                assert own == {"NVIDIA_VISIBLE_DEVICES": made.mig_uuid}
            assert not common
            continue
        ordinals = sorted(record.devices, key=lambda d: index[d.uuid])
        for ordinal, device in enumerate(ordinals):
            own = by_name[cdi_device_name(uid, device.device_name)]
            assert own[f"CUDA_DEVICE_MEMORY_LIMIT_{ordinal}"] == encode_memory_limit(
                device.memory_limit_bytes
            )
            assert own[f"CUDA_DEVICE_SM_LIMIT_{ordinal}"] == encode_core_limit(device.core_limit)
        assert common["NVIDIA_VISIBLE_DEVICES"] == ",".join(d.uuid for d in ordinals)
        cache = claim_cache_location(paths, uid, record.cache_nonce)
        assert common["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == cache.container_file
        mounts = spec["containerEdits"]["mounts"]
        assert {"hostPath": cache.host_dir, "containerPath": cache.container_dir} in [
            {k: m[k] for k in ("hostPath", "containerPath")} for m in mounts
        ]
        cache_dirs.add(str(Path(cache.host_dir).relative_to(paths.cache_root)) + "/")
    listed = {name for name in recording.host_files(node)["vgpu"] if name.count("/") == 2}
    assert listed == cache_dirs, "a cache dir for each share claim, no other"


def test_controller_reads_usage_within_capacity(recording: Recording) -> None:
    """The current controller's inventory of the recorded slices finds every allocated
    device; no device is used past its shares, memory or cores; no two claims hold
    overlapping MIG placements of one card."""
    claims = [c for c in recording.objects("resourceclaims") if allocated_node(c)]
    assert claims
    slices = recording.objects("resourceslices")
    assert usage_problems(slices, claims, recording.driver) == []


def _legacy_nodes(recording: Recording) -> dict[str, dict[str, Any]]:
    return {
        n["metadata"]["name"]: n
        for n in recording.objects("nodes")
        if n["metadata"]["name"] in recording.manifest["legacy_nodes"]
    }


def test_register_annotation_decodes_to_the_nodes_cards(recording: Recording) -> None:
    for name, node in _legacy_nodes(recording).items():
        registered = decode_node_devices(node["metadata"]["annotations"][NODE_NVIDIA_REGISTER])
        gpus = recording.gpus(name)
        assert [d.id for d in registered] == [g.uuid for g in gpus]
        assert [d.index for d in registered] == [g.index for g in gpus]
        assert all(d.count == 10 and d.devcore == 100 and d.health for d in registered)
        assert [d.devmem for d in registered] == [g.memory_bytes // MIB for g in gpus]


def legacy_pods(recording: Recording) -> list[dict[str, Any]]:
    asked = recording.manifest["legacy_pods"]
    pods = [p for p in recording.objects("pods") if p["metadata"]["name"] in asked]
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(asked)
    return pods


def test_pod_annotations_decode_and_fit_the_registered_cards(recording: Recording) -> None:
    """Each pod bound, served (bind-phase success, nothing left to allocate), with the cards
    and memory it asked for; no card past its split count, memory or cores."""
    nodes = _legacy_nodes(recording)
    registered = {
        d.id: d
        for node in nodes.values()
        for d in decode_node_devices(node["metadata"]["annotations"][NODE_NVIDIA_REGISTER])
    }
    load: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in legacy_pods(recording):
        annotations = pod["metadata"]["annotations"]
        limits = recording.manifest["legacy_pods"][pod["metadata"]["name"]]
        assert BindPhase(annotations[BIND_PHASE]) is BindPhase.SUCCESS
        assert annotations[VGPU_NODE] == pod["spec"]["nodeName"] in nodes
        assert all(not c for c in decode_pod_devices(annotations[VGPU_DEVICES_TO_ALLOCATE]))
        (container,) = decode_pod_devices(annotations[VGPU_DEVICES_ALLOCATED])
        assert len(container) == int(limits["nvidia.com/gpu"])
        for device in container:
            assert device.usedmem == int(limits["nvidia.com/gpumem"])
            assert device.usedcores == int(limits.get("nvidia.com/gpucores", 0))
            load[device.uuid].update({"count": 1, "mem": device.usedmem, "cores": device.usedcores})
    for uuid, total in load.items():
        card = registered[uuid]
        assert total["count"] <= card.count and total["mem"] <= card.devmem, uuid
        assert total["cores"] <= card.devcore, uuid


def test_allocate_answers_agree_with_the_pod_annotations(recording: Recording) -> None:
    """Allocate gave each container its annotated cards in order, their limits as the
    current encoders write them, and the cache file where the current code puts it."""
    for name in recording.manifest["legacy_nodes"]:
        answers = recording.read(f"nodes/{name}/allocate-responses.json")
        listed = set(recording.host_files(name)["vgpu"])
        paths = recording.libvgpu_paths(name)
        for pod in legacy_pods(recording):
            annotations = pod["metadata"]["annotations"]
            (devices,) = decode_pod_devices(annotations[VGPU_DEVICES_ALLOCATED])
            (container,) = pod["spec"]["containers"]
            env = answers[pod["metadata"]["name"]][container["name"]]["envs"]
            assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(d.uuid for d in devices)
            for ordinal, device in enumerate(devices):
                memory = encode_memory_limit(device.usedmem * MIB)
                assert env[f"CUDA_DEVICE_MEMORY_LIMIT_{ordinal}"] == memory
                assert env[f"CUDA_DEVICE_SM_LIMIT_{ordinal}"] == encode_core_limit(device.usedcores)
            nonce = Path(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]).stem
            cache = legacy_cache_location(paths, pod["metadata"]["uid"], container["name"], nonce)
            assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == cache.container_file
            assert str(Path(cache.host_dir).relative_to(paths.cache_root)) + "/" in listed
