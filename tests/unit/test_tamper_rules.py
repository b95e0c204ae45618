"""The containers that could reach around libvgpu, found in plain pod specs."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.objects.tamper_rules import GuardedPaths, TamperFinding, tamper_findings

GUARDED = GuardedPaths(
    host=("/usr/local/vgpu", "/tmp/vgpulock", "/etc/ld.so.preload"),
    container=("/etc/ld.so.preload", "/usr/local/vgpu"),
)


def pod(sidecar: dict[str, Any], volumes: list[dict[str, Any]] = ()) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [{"name": "main"}, {"name": "side", **sidecar}],
            "volumes": list(volumes),
        }
    }


def host_volume(path: str) -> dict[str, Any]:
    return {"name": "v", "hostPath": {"path": path}}


@pytest.mark.parametrize(
    ("sidecar", "volumes", "field"),
    [
        ({"securityContext": {"privileged": True}}, [], "securityContext.privileged"),
        (
            {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
            [],
            "securityContext.capabilities.add",
        ),
        (
            {"securityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN"]}}},
            [],
            "securityContext.capabilities.add",
        ),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/x"}]},
            [host_volume("/")],
            "volumeMounts[0]",
        ),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/x"}]},
            [host_volume("/usr/local/vgpu/containers")],
            "volumeMounts[0]",
        ),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/x"}]},
            [host_volume("/tmp/vgpulock")],
            "volumeMounts[0]",
        ),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/etc/ld.so.preload"}]},
            [host_volume("/srv/empty")],
            "volumeMounts[0]",
        ),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "etc/ld.so.preload"}]},
            [host_volume("/srv/empty")],
            "volumeMounts[0]",
        ),
    ],
)
def test_a_container_that_could_lift_the_limits_is_found(
    sidecar: dict[str, Any], volumes: list[dict[str, Any]], field: str
) -> None:
    findings = tamper_findings(pod(sidecar, volumes), GUARDED)
    assert [(f.container, f.field) for f in findings] == [("side", f"spec.containers[1].{field}")]
    assert findings[0].reason


def test_ordinary_containers_and_volumes_pass() -> None:
    sidecar = {
        "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}, "privileged": False},
        "volumeMounts": [{"name": "v", "mountPath": "/data"}, {"name": "cm", "mountPath": "/etc"}],
    }
    volumes = [host_volume("/srv/data"), {"name": "cm", "configMap": {"name": "x"}}]
    assert tamper_findings(pod(sidecar, volumes), GUARDED) == []


def test_init_containers_are_checked_too() -> None:
    spec = {"spec": {"initContainers": [{"name": "i", "securityContext": {"privileged": True}}]}}
    assert tamper_findings(spec, GUARDED) == [
        TamperFinding(
            "i",
            "spec.initContainers[0].securityContext.privileged",
            "a privileged container can remount libvgpu's read-only preload list",
        )
    ]
