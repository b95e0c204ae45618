"""The deploy/ overlays as kubectl renders them, for the deploy and RBAC-audit tests.

Rendering shells out to `kubectl kustomize` (the tool users run); where kubectl
is absent the caller skips with that reason rather than reimplementing kustomize.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("dra", "dra-scheduler-allocated", "legacy")
NAMESPACE = "vgpu-system"


def kubectl_or_skip() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the overlays cannot be rendered with kustomize")
    return kubectl


@functools.cache
def _render(kubectl: str, target: str) -> str:
    done = subprocess.run(
        [kubectl, "kustomize", target], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {target} failed: {done.stderr}"
    return done.stdout


def render(overlay: str) -> list[dict[str, Any]]:
    """The objects of `deploy/overlays/<overlay>` (a fresh copy each call)."""
    text = _render(kubectl_or_skip(), str(DEPLOY / "overlays" / overlay))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind} {name} is not in the rendered overlay")


def render_components(tmp_path: Path, components: tuple[str, ...]) -> list[dict[str, Any]]:
    """The base plus `deploy/components/<name>` for each name: optional combinations
    (cert-manager, ServiceMonitor) that no shipped overlay holds."""
    here = tmp_path / "kustomization"
    here.mkdir()
    to_deploy = os.path.relpath(DEPLOY, here)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{to_deploy}/base"],
        "components": [f"{to_deploy}/components/{name}" for name in components],
    }
    (here / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    text = _render(kubectl_or_skip(), str(here))
    return [doc for doc in yaml.safe_load_all(text) if doc]
