"""The image deploy/ runs is the release pyproject.toml names: a version bump that forgets
the kustomizations (or a tag pinned in one manifest) fails here, not in a cluster that runs
yesterday's image under today's manifests."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
IMAGE = "vgpu-dra-driver"


def package_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as pyproject:
        return str(tomllib.load(pyproject)["project"]["version"])


def yaml_documents(path: Path) -> list[object]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def containers(value: object) -> list[dict[str, object]]:
    """Every container and init container anywhere in a manifest."""
    found: list[dict[str, object]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("containers", "initContainers") and isinstance(inner, list):
                found.extend(item for item in inner if isinstance(item, dict))
            else:
                found.extend(containers(inner))
    elif isinstance(value, list):
        for inner in value:
            found.extend(containers(inner))
    return found


def test_every_kustomization_tags_the_image_with_the_package_version() -> None:
    version = package_version()
    tags = {
        str(path.relative_to(DEPLOY)): entry.get("newTag")
        for path in sorted(DEPLOY.rglob("kustomization.yaml"))
        for doc in yaml_documents(path)
        if isinstance(doc, dict)
        for entry in doc.get("images") or []
        if entry.get("name") == IMAGE
    }
    # The base and each shipped overlay set it (an overlay's own entry wins over the base's).
    assert {"base/kustomization.yaml", "overlays/dra/kustomization.yaml"} <= set(tags)
    assert tags == dict.fromkeys(tags, version)


def test_no_manifest_pins_its_own_tag_of_the_image() -> None:
    """A tag written in a manifest (`vgpu-dra-driver:0.1.0`) would outlive a version bump:
    kustomize's `newTag` then leaves that container on the old release."""
    images = [
        (str(path.relative_to(DEPLOY)), str(container.get("image")))
        for path in sorted(DEPLOY.rglob("*.yaml"))
        for doc in yaml_documents(path)
        for container in containers(doc)
        if str(container.get("image", "")).split(":")[0].split("@")[0] == IMAGE
    ]
    assert len(images) >= 5
    assert [(path, image) for path, image in images if image != IMAGE] == []
