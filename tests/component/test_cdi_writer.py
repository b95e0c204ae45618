"""The spec writer on real files: content, modes, atomic replace, crash leftovers, removal."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdi.errors import InvalidCdiNameError, InvalidCdiSpecError
from cdi.naming import ClaimUID
from cdi.spec import CdiContainerEdits, CdiDevice, CdiSpec, ClaimDeviceEdits, build_claim_spec
from cdi.writer import CdiSpecWriter
from libvgpu.container_edits import ContainerEdits, EnvVar, Mount

UID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"
OTHER_UID = "a7f0c3a2-4b1d-4c8e-9a55-1e2f3a4b5c6d"
SPEC_NAME = f"k8s.vgpu.hami.io-claim_{UID}.json"


def claim_spec(library: Path, uid: str = UID, limit: str = "1024m") -> CdiSpec:
    """A spec mounting `library`, a real file: a runtime refuses a missing mount source."""
    edits = ContainerEdits(
        (EnvVar("CUDA_DEVICE_MEMORY_LIMIT_0", limit),),
        (Mount(str(library), "/usr/local/vgpu/libvgpu.so", read_only=True),),
    )
    return build_claim_spec(uid, [ClaimDeviceEdits("gpu-0", 0, edits)])


def files_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.fixture
def restrictive_umask() -> Iterator[None]:
    """The plugin may run under any umask; the runtime must still read the spec."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def cdi_dir(tmp_path: Path) -> Path:
    return tmp_path / "run" / "cdi"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    path = tmp_path / "host" / "libvgpu.so"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF")
    return path


def test_a_written_spec_has_the_built_content_and_is_readable_by_all(
    library: Path, cdi_dir: Path, restrictive_umask: None
):
    spec = claim_spec(library)
    path = CdiSpecWriter(cdi_dir).write_claim_spec(spec)
    assert path == cdi_dir / SPEC_NAME
    assert path.read_text() == spec.to_json()
    assert json.loads(path.read_text())["devices"][0]["name"] == f"{UID}-gpu-0"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(cdi_dir.stat().st_mode) == 0o755
    assert files_under(cdi_dir) == [SPEC_NAME]


def test_an_existing_directory_keeps_its_mode(library: Path, cdi_dir: Path):
    cdi_dir.mkdir(parents=True, mode=0o700)
    cdi_dir.chmod(0o700)
    CdiSpecWriter(cdi_dir).write_claim_spec(claim_spec(library))
    assert stat.S_IMODE(cdi_dir.stat().st_mode) == 0o700


def test_rewriting_replaces_the_file_whole(library: Path, cdi_dir: Path):
    writer = CdiSpecWriter(cdi_dir)
    writer.write_claim_spec(claim_spec(library, limit="1024m"))
    before = (cdi_dir / SPEC_NAME).stat().st_ino
    writer.write_claim_spec(claim_spec(library, limit="2048m"))
    path = cdi_dir / SPEC_NAME
    assert path.read_text() == claim_spec(library, limit="2048m").to_json()
    assert path.stat().st_ino != before
    assert files_under(cdi_dir) == [SPEC_NAME]


def test_a_crash_between_temp_write_and_rename_leaves_nothing_visible(library: Path, cdi_dir: Path):
    writer = CdiSpecWriter(cdi_dir)
    staged = writer.stage(claim_spec(library))
    # The process dies here: commit never runs.
    assert not (cdi_dir / SPEC_NAME).exists()
    assert staged.temp_path.parent == cdi_dir
    assert staged.temp_path.name.startswith(".")
    assert not staged.temp_path.name.endswith((".json", ".yaml"))
    assert staged.temp_path.read_text() == claim_spec(library).to_json()
    assert writer.list_claim_specs() == []

    restarted = CdiSpecWriter(cdi_dir)
    assert restarted.sweep_temp_files() == [staged.temp_path]
    assert files_under(cdi_dir) == []
    assert restarted.sweep_temp_files() == []


def test_a_crash_during_a_rewrite_keeps_the_old_spec(library: Path, cdi_dir: Path):
    writer = CdiSpecWriter(cdi_dir)
    writer.write_claim_spec(claim_spec(library, limit="1024m"))
    writer.stage(claim_spec(library, limit="2048m"))
    assert (cdi_dir / SPEC_NAME).read_text() == claim_spec(library, limit="1024m").to_json()
    writer.sweep_temp_files()
    assert files_under(cdi_dir) == [SPEC_NAME]
    assert writer.list_claim_specs() == [UID]


def test_commit_makes_a_staged_spec_visible(library: Path, cdi_dir: Path):
    writer = CdiSpecWriter(cdi_dir)
    staged = writer.stage(claim_spec(library))
    assert writer.commit(staged) == cdi_dir / SPEC_NAME
    assert not staged.temp_path.exists()
    assert writer.list_claim_specs() == [UID]


def test_sweep_leaves_other_programs_files(library: Path, cdi_dir: Path):
    cdi_dir.mkdir(parents=True)
    foreign = [
        f".k8s.gpu.nvidia.com-claim_{UID}.json.0123abcd.tmp",
        ".nvidia.yaml.swp",
        "nvidia.yaml",
    ]
    for name in foreign:
        (cdi_dir / name).write_text("{}")
    writer = CdiSpecWriter(cdi_dir)
    writer.stage(claim_spec(library))
    assert len(writer.sweep_temp_files()) == 1
    assert files_under(cdi_dir) == sorted(foreign)


@pytest.mark.parametrize("uid", ["../x", "a/b", "\x00", f"../{UID}", f"{UID}/../../etc"])
def test_a_hostile_uid_writes_nothing_anywhere(tmp_path: Path, cdi_dir: Path, uid: str):
    writer = CdiSpecWriter(cdi_dir)
    device = CdiDevice(f"{UID}-gpu-0", CdiContainerEdits(env=("A=1",)))
    with pytest.raises(InvalidCdiNameError) as caught:
        writer.write_claim_spec(CdiSpec(ClaimUID(uid), (device,)))
    assert caught.value.field == "claimUID"
    with pytest.raises(InvalidCdiNameError):
        writer.remove_claim_spec(uid)
    assert files_under(tmp_path) == []


def test_an_invalid_spec_is_refused_before_any_file_exists(tmp_path: Path, cdi_dir: Path):
    device = CdiDevice(f"{UID}-gpu-0", CdiContainerEdits(env=("NOVALUE",)))
    with pytest.raises(InvalidCdiSpecError):
        CdiSpecWriter(cdi_dir).write_claim_spec(CdiSpec(ClaimUID(UID), (device,)))
    assert files_under(tmp_path) == []


def test_remove_is_idempotent_and_touches_only_that_claim(library: Path, cdi_dir: Path):
    writer = CdiSpecWriter(cdi_dir)
    writer.remove_claim_spec(UID)
    writer.write_claim_spec(claim_spec(library, UID))
    writer.write_claim_spec(claim_spec(library, OTHER_UID))
    writer.remove_claim_spec(UID)
    writer.remove_claim_spec(UID)
    assert writer.list_claim_specs() == [OTHER_UID]


def test_listing_finds_our_specs_and_ignores_foreign_files(library: Path, cdi_dir: Path):
    writer = CdiSpecWriter(cdi_dir)
    assert writer.list_claim_specs() == []
    writer.write_claim_spec(claim_spec(library, OTHER_UID))
    writer.write_claim_spec(claim_spec(library, UID))
    for name in [
        f"k8s.gpu.nvidia.com-claim_{UID}.json",
        f"k8s.vgpu.hami.io-claim_{UID}.yaml",
        "k8s.vgpu.hami.io-claim_not-a-uid.json",
        "nvidia.yaml",
    ]:
        (cdi_dir / name).write_text("{}")
    (cdi_dir / f"k8s.vgpu.hami.io-claim_{'b' * 8}-4b1d-4c8e-9a55-1e2f3a4b5c6d.json").mkdir()
    writer.stage(claim_spec(library, "c7f0c3a2-4b1d-4c8e-9a55-1e2f3a4b5c6d"))
    assert writer.list_claim_specs() == [UID, OTHER_UID]
