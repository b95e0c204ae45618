"""CDI specs as a container runtime applies them: the tests' applier itself, the
host checks prepare makes before writing a spec, and the suite-wide watch that
applies every spec a test writes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from cdi_applier import CdiApplyError, SpecWriteWatch, apply_devices

from cdi.spec import ClaimDeviceEdits, build_claim_spec
from cdi.writer import CdiSpecWriter
from dra_driver.objects.pod_claims import container_claims, reserving_pods
from kubeletplugin.host_files import HostSetupError, check_libvgpu_files, host_device_nodes
from libvgpu.container_edits import ContainerEdits, EnvVar, Mount
from libvgpu.settings import LibvgpuPaths

UID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"
OTHER_UID = "a7f0c3a2-4b1d-4c8e-9a55-1e2f3a4b5c6d"
KIND = "k8s.vgpu.hami.io/claim"


def write_spec(directory: Path, name: str, document: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(document))


def spec(uid: str, devices: dict[str, dict], common: dict | None = None) -> dict:
    document: dict = {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [{"name": f"{uid}-{n}", "containerEdits": e} for n, e in devices.items()],
    }
    if common:
        document["containerEdits"] = common
    return document


def test_spec_edits_come_before_their_devices_and_the_last_env_value_wins(tmp_path: Path):
    """Two claims' specs merged in one container: each spec's common env, then
    its devices; per-ordinal keys from the second claim overwrite the first's."""
    cdi = tmp_path / "cdi"
    write_spec(
        cdi,
        "a.json",
        spec(
            UID,
            {"gpu-0": {"env": ["CUDA_DEVICE_MEMORY_LIMIT_0=2048m"]}},
            {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]},
        ),
    )
    write_spec(
        cdi,
        "b.json",
        spec(
            OTHER_UID,
            {"gpu-1": {"env": ["CUDA_DEVICE_MEMORY_LIMIT_0=6144m"]}},
            {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-b"]},
        ),
    )
    applied = apply_devices([f"{KIND}={UID}-gpu-0", f"{KIND}={OTHER_UID}-gpu-1"], [cdi])
    assert applied.env == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-b",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m",
    }
    assert list(applied.env) == [
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_DEVICE_MEMORY_LIMIT_0",
    ]


def test_a_later_spec_dir_wins_and_unknown_ids_are_unresolvable(tmp_path: Path):
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    write_spec(static, "x.json", spec(UID, {"gpu-0": {"env": ["FROM=static"]}}))
    write_spec(dynamic, "x.json", spec(UID, {"gpu-0": {"env": ["FROM=dynamic"]}}))
    assert apply_devices([f"{KIND}={UID}-gpu-0"], [static, dynamic]).env == {"FROM": "dynamic"}
    with pytest.raises(
        CdiApplyError, match=re.escape(f"unresolvable CDI devices {KIND}={UID}-gpu-9")
    ):
        apply_devices([f"{KIND}={UID}-gpu-9"], [static, dynamic])


def test_missing_host_device_nodes_and_mount_sources_are_refused(tmp_path: Path):
    cdi = tmp_path / "cdi"
    fifo = tmp_path / "nvidia0"
    os.mkfifo(fifo)
    regular = tmp_path / "regular"
    regular.write_text("")
    write_spec(
        cdi,
        "s.json",
        spec(
            UID,
            {
                "ok": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(fifo)}]},
                "gone": {"deviceNodes": [{"path": "/dev/nvidiactl-missing"}]},
                "file": {"deviceNodes": [{"path": "/dev/x", "hostPath": str(regular)}]},
                "unmounted": {
                    "mounts": [{"hostPath": str(tmp_path / "no.so"), "containerPath": "/l.so"}]
                },
            },
        ),
    )
    applied = apply_devices([f"{KIND}={UID}-ok"], [cdi])
    assert applied.device_nodes == {"/dev/nvidia0": str(fifo)}
    with pytest.raises(CdiApplyError, match='failed to stat CDI host device "/dev/nvidiactl-m'):
        apply_devices([f"{KIND}={UID}-gone"], [cdi])
    with pytest.raises(CdiApplyError, match="not a device node"):
        apply_devices([f"{KIND}={UID}-file"], [cdi])
    with pytest.raises(CdiApplyError, match=re.escape("no.so' to rootfs at '/l.so'")):
        apply_devices([f"{KIND}={UID}-unmounted"], [cdi])


def test_the_watch_applies_each_spec_as_it_is_written(
    tmp_path: Path, cdi_spec_watch: SpecWriteWatch
):
    """The suite-wide check catches a spec naming a host file that is not there."""
    library = tmp_path / "libvgpu.so"
    library.write_bytes(b"\x7fELF")
    writer = CdiSpecWriter(tmp_path / "cdi")

    def claim_spec(uid: str, source: Path):
        edits = ContainerEdits(
            (EnvVar("CUDA_DEVICE_MEMORY_LIMIT_0", "1024m"),),
            (Mount(str(source), "/usr/local/vgpu/libvgpu.so", read_only=True),),
        )
        return build_claim_spec(uid, [ClaimDeviceEdits("gpu-0", 0, edits)])

    good = writer.write_claim_spec(claim_spec(UID, library))
    bad = writer.write_claim_spec(claim_spec(OTHER_UID, tmp_path / "absent.so"))
    assert good in cdi_spec_watch.applied
    (problem,) = cdi_spec_watch.take_problems()
    assert problem.startswith(f"{bad}: error mounting '{tmp_path}/absent.so'")


def test_host_nodes_are_listed_only_when_present_and_a_gpus_own_node_is_required(
    tmp_path: Path,
):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia1"):
        os.mkfifo(dev / name)
    (dev / "nvidia-uvm-tools").write_text("not a device node")
    nodes = host_device_nodes(dev, [1, 1])
    assert nodes == {
        "/dev/nvidiactl": str(dev / "nvidiactl"),
        "/dev/nvidia-uvm": str(dev / "nvidia-uvm"),
        "/dev/nvidia1": str(dev / "nvidia1"),
    }
    edits = ContainerEdits((EnvVar("CUDA_DEVICE_MEMORY_LIMIT_0", "1024m"),), ())
    document = build_claim_spec(
        UID, [ClaimDeviceEdits("gpu-1", 1, edits)], host_nodes=nodes
    ).to_document()
    write_spec(tmp_path / "cdi", "s.json", document)
    applied = apply_devices([f"{KIND}={UID}-gpu-1"], [tmp_path / "cdi"])
    assert applied.device_nodes == nodes
    with pytest.raises(
        HostSetupError, match=re.escape(f"device node {dev}/nvidia0 of GPU minor 0")
    ):
        host_device_nodes(dev, [0])


def test_libvgpu_files_are_checked_with_the_install_hint(tmp_path: Path):
    paths = LibvgpuPaths(host_dir=str(tmp_path), lock_dir=str(tmp_path / "lock"))
    with pytest.raises(HostSetupError) as missing:
        check_libvgpu_files(paths, with_preload=True)
    assert str(missing.value) == (
        f"libvgpu library {tmp_path}/libvgpu.so is missing on this node; run `dra-driver "
        "install-libvgpu` on this node (the plugin's init container does)"
    )
    (tmp_path / "libvgpu.so").write_bytes(b"\x7fELF")
    (tmp_path / "lock").mkdir()
    check_libvgpu_files(paths, with_preload=False)
    with pytest.raises(HostSetupError, match="libvgpu preload list"):
        check_libvgpu_files(paths, with_preload=True)


def test_container_claims_follow_claim_names_templates_and_init_containers():
    pod = {
        "spec": {
            "initContainers": [{"name": "warm", "resources": {"claims": [{"name": "a"}]}}],
            "containers": [
                {"name": "main", "resources": {"claims": [{"name": "a"}, {"name": "t"}]}},
                {"name": "side", "resources": {"claims": [{"name": "pending"}]}},
                {"name": "plain"},
            ],
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "claim-a"},
                {"name": "t", "resourceClaimTemplateName": "tmpl"},
                {"name": "pending", "resourceClaimTemplateName": "tmpl"},
            ],
        },
        "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "pod-t-x1"}]},
    }
    assert container_claims(pod) == {
        "warm": frozenset({"claim-a"}),
        "main": frozenset({"claim-a", "pod-t-x1"}),
    }
    claim = {
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": "p", "uid": "u1"},
                {"apiGroup": "example.com", "resource": "pods", "name": "q", "uid": "u2"},
                {"resource": "jobs", "name": "j", "uid": "u3"},
            ]
        }
    }
    assert [(p.name, p.uid) for p in reserving_pods(claim)] == [("p", "u1")]
