"""The ValidatingAdmissionPolicies deploy/ installs for a mode, read from deploy/ itself.

The simulation installs exactly what `kubectl apply -k deploy/overlays/<mode>`
would: the overlay's kustomization is followed through its `resources` and
`components` to the YAML files, and every ValidatingAdmissionPolicy and its
binding found there is created in the emulator before any component starts.
Reading the files rather than a copy means a policy edited in deploy/ is the
one the simulation and its tests run against.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.yaml_files import read_yaml_document, read_yaml_documents

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
COLLECTIONS = {
    "ValidatingAdmissionPolicy": f"{ADMISSION_API}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION_API}/validatingadmissionpolicybindings",
}
"""Policies before bindings: a binding of a policy not yet stored binds nothing."""
KUSTOMIZATION = "kustomization.yaml"
MIXED = "mixed"
MIXED_PARTS = ("overlays/dra", "overlays/legacy", "components/mixed")
"""deploy/ has no mixed overlay: components/mixed is applied with both overlays' components,
so the mixed simulation installs what those three pull in (base once)."""


def overlay(mode: str) -> Path:
    """deploy/overlays/<mode>: the modes are named as the overlays are."""
    path = DEPLOY / "overlays" / mode
    if not (path / KUSTOMIZATION).is_file():
        raise InvalidParameterError("--mode", f"deploy/ has no overlay {mode} ({path})")
    return path


def _manifest_files(directory: Path, seen: set[Path]) -> Iterator[Path]:
    """The YAML files a kustomization pulls in, through its resources and components."""
    directory = directory.resolve()
    if directory in seen:
        return
    seen.add(directory)
    kustomization = read_yaml_document(directory / KUSTOMIZATION) or {}
    for entry in [
        *(kustomization.get("resources") or []),
        *(kustomization.get("components") or []),
    ]:
        path = (directory / entry).resolve()
        if path.is_dir():
            yield from _manifest_files(path, seen)
        else:
            yield path


def _mode_parts(mode: str) -> list[Path]:
    if mode == MIXED:
        return [DEPLOY / part for part in MIXED_PARTS]
    return [overlay(mode)]


def admission_policies(mode: str) -> list[dict[str, Any]]:
    """The mode's policies, then their bindings, in the order the files list them."""
    seen: set[Path] = set()
    documents = [
        document
        for part in _mode_parts(mode)
        for path in _manifest_files(part, seen)
        for document in read_yaml_documents(path)
        if isinstance(document, dict) and document.get("kind") in COLLECTIONS
    ]
    return sorted(documents, key=lambda d: list(COLLECTIONS).index(d["kind"]))


async def install_policies(client: KubeClient, mode: str) -> list[str]:
    """Create the mode's policies and bindings as the administrator; their names."""
    names = []
    for document in admission_policies(mode):
        await client.create(COLLECTIONS[document["kind"]], document)
        if document["kind"] == "ValidatingAdmissionPolicy":
            names.append(document["metadata"]["name"])
    return names
