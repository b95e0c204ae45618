"""Migration must not change what a workload gets: every `examples/legacy/` pod runs once
through the legacy path (webhook, extender /filter and /bind, NVIDIA's device plugin
Allocate: `simulate --mode legacy`) and once migrated (the real `/migrate` webhook on the
legacy scheduler rewrites it against the API emulator, then `simulate --mode dra` runs
the migrated pod and the template the webhook wrote: the real controller allocates the
claim and the real kubelet plugin prepares it), and the two containers are compared.

NVIDIA: HAMi-core's limits in the env, CUDA_DISABLE_CONTROL, and the libvgpu library and
/etc/ld.so.preload mounted read-only at the same container paths (host paths and the cache
dir differ by design: DRA keeps a dir per claim). Other vendors' device plugins are not
ours, so their legacy side ends at the scheduler's pod keys: the MiB and cores granted per
device there against the claim's VGPU_SHARE_* env and the share `status` shows, and
Ascend's vNPU template where both paths name one. An example the migration cannot
express is not compared: `dra-driver migrate plan` must report it with its reason."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from legacy_fixtures import base_url, legacy_scheduler
from simulate_patience import PATIENT

from controller.legacy.config import LegacySettings
from dra_driver.cli import main
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.dra_vendors import dra_vendor
from dra_driver.objects.migration import MIGRATE_LABEL, MIGRATED_TEMPLATE_LABEL
from simulator.apiserver import run_in_thread
from simulator.legacy_vendors import DEVICE_CONFIG_FILE, ENABLED_FLAGS, device_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "legacy"
SETTINGS = LegacySettings(device_config=device_config(), enabled_vendor_flags=ENABLED_FLAGS)
RESOURCE = "/apis/resource.k8s.io/v1"
MIB = 1 << 20
NVIDIA_PODS = ("legacy-half", "legacy-shared", "legacy-whole")
NOT_TRANSLATABLE = {"legacy-metax": "metax-tech.com/gpu"}
"""Example pods DRA cannot express yet, and the resource the plan's reason names."""
HAMI_CORE_LIMIT = re.compile(r"CUDA_DEVICE_(MEMORY|SM)_LIMIT(_\d+)?")
LIBVGPU_MOUNTS = {"/usr/local/vgpu/libvgpu.so", "/etc/ld.so.preload"}


def _example_pods() -> list[dict[str, Any]]:
    return [
        next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Pod")
        for path in sorted(EXAMPLES.glob("*.yaml"))
    ]


def _review(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": namespace,
            "object": pod,
        },
    }


def _patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The webhook's JSONPatch (whole-field add/replace operations) applied to the pod."""
    result = json.loads(json.dumps(pod))
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] in ("add", "replace"), op
        *parents, last = op["path"].strip("/").split("/")
        target = result
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = op["value"]
    return result


async def _migrate(kubeconfig: Path, namespace: str) -> list[dict[str, Any]]:
    """Every example through `/migrate` in an opted-in namespace: the migrated pods, then
    the templates the webhook wrote (namespace dropped: the simulation applies them to its
    own); pods it left as they were are left out."""
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        labels = {MIGRATE_LABEL: "true"}
        await client.create(
            "/api/v1/namespaces", {"metadata": {"name": namespace, "labels": labels}}
        )
        migrated = []
        async with legacy_scheduler(client, SETTINGS) as server, aiohttp.ClientSession() as http:
            for pod in _example_pods():
                body = _review(pod, namespace)
                async with http.post(base_url(server) + "/migrate", json=body) as answer:
                    response = (await answer.json())["response"]
                assert response["allowed"], response
                if "patch" in response:
                    migrated.append(_patched(pod, response))
        listed = await client.list(
            f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
            labelSelector=f"{MIGRATED_TEMPLATE_LABEL}=true",
        )
    finally:
        await client.aclose()
    templates = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": t["metadata"]["name"], "labels": t["metadata"]["labels"]},
            "spec": t["spec"],
        }
        for t in listed["items"]
    ]
    return [*templates, *migrated]


async def _create_examples(kubeconfig: Path, namespace: str) -> None:
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        for pod in _example_pods():
            await client.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    finally:
        await client.aclose()


def _json_of(arguments: list[str]) -> tuple[int, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(arguments)
    return status, json.loads(out.getvalue())


@pytest.fixture(scope="module")
def migration(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The migrated scenario file and `migrate plan`'s answer for the unmigrated examples."""
    root = tmp_path_factory.mktemp("migration")
    with run_in_thread() as server:
        kubeconfig = server.write_kubeconfig(root / "kubeconfig")
        documents = asyncio.run(_migrate(kubeconfig, "opted-in"))
        asyncio.run(_create_examples(kubeconfig, "legacy"))
        # The scheduler's own device config, as an operator passes the cluster's ConfigMap.
        status, plan = _json_of(
            [
                "migrate",
                "plan",
                "--kubeconfig",
                str(kubeconfig),
                "--device-config-file",
                str(DEVICE_CONFIG_FILE),
                "-n",
                "legacy",
                "-o",
                "json",
            ]
        )
    assert status == 0
    scenario = root / "migrated.yaml"
    scenario.write_text(yaml.safe_dump_all(documents))
    yield {"scenario": scenario, "plan": {entry["name"]: entry for entry in plan}}


@pytest.fixture(scope="module")
def legacy_run() -> dict[str, Any]:
    status, report = _json_of(
        ["simulate", *PATIENT, "--mode", "legacy", "--scenario", str(EXAMPLES), "-o", "json"]
    )
    assert status == 0
    return report


@pytest.fixture(scope="module")
def migrated_run(migration: dict[str, Any]) -> dict[str, Any]:
    status, report = _json_of(
        ["simulate", *PATIENT, "--scenario", str(migration["scenario"]), "-o", "json"]
    )
    assert status == 0
    return report


def _pods(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {pod["name"]: pod for pod in report["pods"]}


TRANSLATED = sorted(
    pod["metadata"]["name"]
    for pod in _example_pods()
    if pod["metadata"]["name"] not in NOT_TRANSLATABLE
)


def test_every_translatable_example_runs_migrated_on_a_claim(legacy_run, migrated_run) -> None:
    legacy, migrated = _pods(legacy_run), _pods(migrated_run)
    assert sorted(legacy) == sorted([*TRANSLATED, *NOT_TRANSLATABLE])
    assert sorted(migrated) == TRANSLATED
    for name in TRANSLATED:
        assert (legacy[name]["phase"], migrated[name]["phase"]) == ("Running", "Running"), name
        assert migrated[name]["claims"], name
        assert migrated[name]["node"].split("-")[1] == legacy[name]["node"].split("-")[1]


@pytest.mark.parametrize("name", NVIDIA_PODS)
def test_nvidia_containers_get_the_same_hami_core_limits_and_mounts(
    legacy_run, migrated_run, name
) -> None:
    before = _pods(legacy_run)[name]["containers"]["app"]
    after = _pods(migrated_run)[name]["containers"]["app"]

    def limits(env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if HAMI_CORE_LIMIT.fullmatch(k)}

    assert limits(before["env"]) == limits(after["env"])
    assert any(v != "0" for v in limits(after["env"]).values())
    assert before["env"]["CUDA_DISABLE_CONTROL"] == after["env"]["CUDA_DISABLE_CONTROL"]
    devices = [len(c["env"]["NVIDIA_VISIBLE_DEVICES"].split(",")) for c in (before, after)]
    assert devices[0] == devices[1]
    assert set(before["mounts"]) & set(after["mounts"]) >= LIBVGPU_MOUNTS
    assert set(before["readOnlyMounts"]) == set(after["readOnlyMounts"]) == LIBVGPU_MOUNTS


def _share_env(env: dict[str, str], index: int) -> tuple[int, int]:
    memory = env[f"VGPU_SHARE_MEMORY_LIMIT_{index}"]
    assert memory.endswith("m"), memory
    return int(memory[:-1]), int(env[f"VGPU_SHARE_CORE_LIMIT_{index}"])


OTHER_VENDORS = [name for name in TRANSLATED if name not in NVIDIA_PODS]


@pytest.mark.parametrize("name", OTHER_VENDORS)
def test_other_vendors_get_the_same_sizes_per_device(
    legacy_run, migrated_run, migration, name
) -> None:
    devices = _pods(legacy_run)[name]["devices"]
    after = _pods(migrated_run)[name]["containers"]["app"]["env"]
    (request,) = migration["plan"][name]["requests"]
    family = dra_vendor(request["deviceClass"].split(".")[0])
    assert after["VGPU_SHARE_VENDOR"] == family.id
    shares = [
        (gpu, share)
        for gpu in migrated_run["gpus"]
        for share in gpu["shares"]
        if name in share["pods"]
    ]
    assert len(shares) == len(devices) == len(after["VGPU_SHARE_DEVICES"].split(","))
    for index, (device, (gpu, share)) in enumerate(zip(devices, shares, strict=True)):
        memory_mib, cores = _share_env(after, index)
        assert (share["memoryBytes"], share["cores"]) == (memory_mib * MIB, cores)
        if family.exclusive:
            # HAMi's whole-card backends write 0 or 100 for a card nobody else may share;
            # DRA charges the whole card.
            assert (share["memoryBytes"], cores) == (gpu["memoryBytes"], 100), name
        elif family.id == "neuron":
            # Legacy counts NeuronCores (two per device in DRA), each with half the memory.
            assert cores == device["cores"] * 50
            assert share["memoryBytes"] * 100 == gpu["memoryBytes"] * cores
        else:
            assert (memory_mib, cores) == (device["memoryMib"], device["cores"]), name


def test_ascend_names_the_same_vnpu_template_both_ways(legacy_run, migrated_run) -> None:
    keys = _pods(legacy_run)["legacy-ascend"]["podKeys"]
    ((allocated),) = json.loads(keys["huawei.com/Ascend910B3"])
    after = _pods(migrated_run)["legacy-ascend"]["containers"]["app"]["env"]
    assert after["ASCEND_VNPU_SPECS"] == allocated["temp"]


@pytest.mark.parametrize("name", sorted(NOT_TRANSLATABLE))
def test_the_plan_reports_what_cannot_be_compared_with_its_reason(migration, name) -> None:
    entry = migration["plan"][name]
    assert (entry["translatable"], entry["template"], entry["requests"]) == (False, None, [])
    (problem,) = entry["problems"]
    assert problem["field"].endswith(f"resources.{NOT_TRANSLATABLE[name]}")
    assert "no DRA DeviceClass" in problem["reason"]


def test_the_plan_says_every_compared_example_is_translatable(migration) -> None:
    assert sorted(n for n, e in migration["plan"].items() if e["translatable"]) == TRANSLATED
