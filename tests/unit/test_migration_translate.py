"""The migration's translation: each vendor's legacy example becomes a claim the DRA
controller reads as the same request (vendor, count, MiB, cores), filters become CEL
selectors that pick the devices HAMi's filters pick, and what DRA cannot say is a typed
reason, never a silent drop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.engine.requests import MEMORY_PERCENT_UNSET
from dra_driver.objects.claim_workloads import claim_request
from dra_driver.objects.dra_cel import cel_device_from_slice, compile_selector
from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
from dra_driver.objects.dra_vendors import DRIVER
from dra_driver.objects.migration import (
    MIGRATED_ANNOTATION,
    POD_CLAIM_NAME,
    build_claim_spec,
    build_claim_template,
    build_migrated_pod,
    family_of,
    opted_in,
    plan_migration,
    template_name,
)
from dra_driver.objects.pod_workloads import pod_request
from simulator.legacy_vendors import ENABLED_FLAGS, device_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "legacy"
BACKENDS = device_config().backends(ENABLED_FLAGS)
UNTRANSLATABLE_EXAMPLES = {"metax-whole-card.yaml"}


def _pod(path: Path) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Pod")


def _gpu_pod(limits: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "app", "resources": {"limits": limits}}]},
    }


TRANSLATABLE = sorted(
    p.name for p in EXAMPLES.glob("*.yaml") if p.name not in UNTRANSLATABLE_EXAMPLES
)


@pytest.mark.parametrize("example", TRANSLATABLE)
def test_every_vendor_example_becomes_the_same_request_in_dra(example: str) -> None:
    pod = _pod(EXAMPLES / example)
    legacy = pod_request(pod, BACKENDS.vendors())
    migration = plan_migration(pod, BACKENDS)
    assert migration.translatable, migration.problems
    claim = {"metadata": {"name": "c", "namespace": "ns"}, "spec": build_claim_spec(migration)}
    dra, names = claim_request(claim, dra_vendor_registry())
    legacy_requests = [r for container in legacy.all_containers for r in container]
    dra_requests = [r for container in dra.containers for r in container]
    assert len(names) == len(legacy_requests) == len(dra_requests)
    for before, after in zip(legacy_requests, dra_requests, strict=True):
        family = family_of(BACKENDS.get(before.vendor))
        assert after.vendor == family.request_type
        assert after.count == before.count
        if family.exclusive:
            assert (after.memory_mib, after.memory_percent) == (0, 100)
            continue
        if family.id == "neuron":
            assert after.cores == before.cores * 50
            assert after.memory_percent == after.cores
            continue
        assert after.memory_on(98304) == before.memory_on(98304)
        assert after.cores == before.cores


def test_metax_whole_cards_are_not_translatable_and_say_why() -> None:
    migration = plan_migration(_pod(EXAMPLES / "metax-whole-card.yaml"), BACKENDS)
    assert not migration.translatable
    (problem,) = migration.problems
    assert problem.field == "spec.containers[0].resources.metax-tech.com/gpu"
    assert "no DRA DeviceClass" in problem.reason


def _device(device_type: str, uuid: str) -> Any:
    return cel_device_from_slice(
        DRIVER,
        {
            "name": "gpu-0",
            "attributes": {"type": {"string": device_type}, "uuid": {"string": uuid}},
        },
    )


def _selected(expressions: tuple[str, ...], device: Any) -> bool:
    return all(compile_selector(e).matches(device) for e in expressions)


def test_type_and_uuid_annotations_select_what_hami_would() -> None:
    pod = _gpu_pod(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
        {
            "nvidia.com/use-gputype": "a100, H100",
            "nvidia.com/nouse-gputype": "PCIE",
            "nvidia.com/nouse-gpuuuid": "GPU-bad",
        },
    )
    (plan,) = plan_migration(pod, BACKENDS).requests
    assert _selected(plan.selectors, _device("NVIDIA-A100-SXM4-80GB", "GPU-1"))
    assert _selected(plan.selectors, _device("NVIDIA-H100-SXM", "GPU-2"))
    assert not _selected(plan.selectors, _device("NVIDIA-A100-PCIE-40GB", "GPU-3"))
    assert not _selected(plan.selectors, _device("NVIDIA-A100-SXM4-80GB", "GPU-bad"))
    assert not _selected(plan.selectors, _device("Tesla-T4", "GPU-4"))


def test_a_use_list_of_empty_entries_matches_no_device_as_in_hami() -> None:
    pod = _gpu_pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gpuuuid": " , "})
    (plan,) = plan_migration(pod, BACKENDS).requests
    assert not _selected(plan.selectors, _device("NVIDIA-A100", "GPU-1"))


def test_numa_priority_and_policies_become_vgpu_config() -> None:
    pod = _gpu_pod(
        {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4000, "nvidia.com/priority": 0},
        {
            "nvidia.com/numa-bind": "true",
            "hami.io/gpu-scheduler-policy": "spread",
            "hami.io/node-scheduler-policy": "binpack",
        },
    )
    spec = build_claim_spec(plan_migration(pod, BACKENDS))
    (config,) = spec["devices"]["config"]
    assert config["requests"] == ["ctr0-nvidia"]
    assert config["opaque"]["parameters"] == {
        "apiVersion": "vgpu.hami.io/v1alpha1",
        "kind": "VGPUConfig",
        "gpuPolicy": "spread",
        "nodePolicy": "binpack",
        "numaBind": True,
        "priority": 0,
    }
    request, _ = claim_request({"metadata": {}, "spec": spec}, dra_vendor_registry())
    assert request.containers[0][0].filters.numa_bind
    assert (request.gpu_policy, request.node_policy) == ("spread", "binpack")


@pytest.mark.parametrize(
    ("annotations", "field", "words"),
    [
        ({"nvidia.com/vgpu-mode": "mig"}, "metadata.annotations[nvidia.com/vgpu-mode]", "MIG"),
        (
            {"hami.io/node-scheduler-policy": "random"},
            "metadata.annotations[hami.io/node-scheduler-policy]",
            "binpack",
        ),
    ],
)
def test_what_dra_cannot_say_is_a_reason_naming_the_field(
    annotations: dict[str, str], field: str, words: str
) -> None:
    migration = plan_migration(_gpu_pod({"nvidia.com/gpu": 1}, annotations), BACKENDS)
    assert not migration.translatable
    assert any(p.field == field and words in p.reason for p in migration.problems)


def test_a_request_hami_drops_is_reported_not_left_out() -> None:
    migration = plan_migration(
        _gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1.5"}), BACKENDS
    )
    assert not migration.translatable
    assert migration.problems[0].field == "spec.containers[0]"
    assert "nvidia.com/gpumem" in migration.problems[0].reason


def test_the_migrated_pod_references_the_template_and_keeps_other_resources() -> None:
    pod = _gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30, "cpu": "1"})
    pod["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100}}}
    ]
    pod["spec"]["containers"].append({"name": "sidecar", "resources": {"limits": {"cpu": "1"}}})
    pod["spec"]["schedulerName"] = "hami-scheduler"
    migration = plan_migration(pod, BACKENDS)
    spec = build_claim_spec(migration)
    name = template_name(spec)
    migrated = build_migrated_pod(pod, migration, BACKENDS, name, "hami-scheduler")
    app, sidecar = migrated["spec"]["containers"]
    assert app["resources"] == {
        "limits": {"cpu": "1"},
        "claims": [{"name": POD_CLAIM_NAME, "request": "ctr0-nvidia"}],
    }
    assert sidecar["resources"] == {"limits": {"cpu": "1"}}
    assert migrated["spec"]["initContainers"][0]["resources"] == {
        "claims": [{"name": POD_CLAIM_NAME, "request": "init0-nvidia"}]
    }
    assert migrated["spec"]["resourceClaims"] == [
        {"name": POD_CLAIM_NAME, "resourceClaimTemplateName": name}
    ]
    assert "schedulerName" not in migrated["spec"]
    assert migrated["metadata"]["annotations"][MIGRATED_ANNOTATION] == name
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    template = build_claim_template("ns", spec)
    assert template["metadata"]["name"] == name
    assert template["spec"]["spec"] == spec


def test_pods_of_one_shape_share_a_template_and_another_shape_gets_its_own() -> None:
    def name(limits: dict[str, Any]) -> str:
        return template_name(build_claim_spec(plan_migration(_gpu_pod(limits), BACKENDS)))

    assert name({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}) == name(
        {"nvidia.com/gpumem": 1000, "nvidia.com/gpu": "1"}
    )
    assert name({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}) != name(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}
    )


def test_a_pod_without_hami_requests_needs_nothing() -> None:
    migration = plan_migration(_gpu_pod({"cpu": "1"}), BACKENDS)
    assert not migration.needed
    assert not migration.translatable


@pytest.mark.parametrize(
    ("pod_meta", "namespace", "expected"),
    [
        ({}, {"vgpu.hami.io/migrate": "true"}, True),
        ({}, {}, False),
        ({"annotations": {"vgpu.hami.io/migrate": "true"}}, {}, True),
        ({"labels": {"vgpu.hami.io/migrate": "true"}}, {}, True),
        (
            {"annotations": {"vgpu.hami.io/migrate": "false"}},
            {"vgpu.hami.io/migrate": "true"},
            False,
        ),
    ],
)
def test_opt_in_by_namespace_label_or_pod(
    pod_meta: dict[str, Any], namespace: dict[str, str], expected: bool
) -> None:
    assert opted_in({"metadata": pod_meta}, namespace) is expected


def test_memory_percentage_is_kept_as_a_percentage() -> None:
    pod = _gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25})
    claim = {"metadata": {}, "spec": build_claim_spec(plan_migration(pod, BACKENDS))}
    request, _ = claim_request(claim, dra_vendor_registry())
    after = request.containers[0][0]
    assert (after.memory_mib, after.memory_percent) == (0, 25)
    assert after.memory_percent != MEMORY_PERCENT_UNSET
