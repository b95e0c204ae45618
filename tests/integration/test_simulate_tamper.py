"""`dra-driver simulate --scenario examples/tamper`: every tamper attempt of issue 17, each
run as its identity against the real components under deploy/'s admission policies, is
refused or neutralised with the reason that stopped it; one that works is ALLOWED, exit 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from simulate_patience import PATIENT

from dra_driver.cli import main

TAMPER = Path(__file__).resolve().parents[2] / "examples" / "tamper"
POD_POLICY = "ValidatingAdmissionPolicy 'vgpu-claim-pods-no-tamper'"
NVIDIA_ONLY = ("--vendors", "nvidia")
"""The attempts aim at NVIDIA shares; other families' nodes would only slow the run."""
WEBHOOK = 'admission webhook "vgpu.hami.io" denied the request'


def simulate(capsys, *args: str) -> dict:
    status = main(["simulate", *PATIENT, *NVIDIA_ONLY, "-o", "json", *args])
    report = json.loads(capsys.readouterr().out)
    report["exit"] = status
    return report


def attempts(report: dict) -> dict[str, dict]:
    return {attempt["name"]: attempt for attempt in report["attempts"]}


def test_dra_mode_refuses_or_neutralises_every_attempt(capsys):
    report = simulate(capsys, "--scenario", str(TAMPER), "--mode", "dra")
    assert report["exit"] == 0
    found = attempts(report)
    assert set(found) == {
        "env-hamicore-variables-dra",
        "envfrom-without-prefix-dra",
        "hostpath-over-libvgpu-dra",
        "hostpath-over-preload-dra",
        "privileged-sidecar-dra",
        "sys-admin-sidecar-dra",
        "claim-opt-out",
        "forged-claim-allocation",
    }
    assert {a["identity"] for a in found.values()} == {"alice"}

    # The CDI spec pins every variable the pod set, shown as pod value -> pinned value.
    for name in ("env-hamicore-variables-dra", "envfrom-without-prefix-dra"):
        attempt = found[name]
        assert attempt["outcome"] == "neutralised", attempt
        assert sorted(attempt["details"]) == [
            "app CUDA_DEVICE_MEMORY_LIMIT_0: 80g -> 10240m",
            "app CUDA_DEVICE_SM_LIMIT_0: 100 -> 30",
            "app CUDA_DISABLE_CONTROL: true -> false",
        ]

    refusals = {
        "hostpath-over-libvgpu-dra": "volume vgpu: hostPath reaches the library",
        "hostpath-over-preload-dra": "container app mounts a hostPath volume over the preload list",
        "privileged-sidecar-dra": "container sidecar is privileged (securityContext.privileged)",
        "sys-admin-sidecar-dra": "container sidecar adds CAP_SYS_ADMIN",
    }
    for name, message in refusals.items():
        attempt = found[name]
        assert attempt["outcome"] == "refused", attempt
        assert POD_POLICY in attempt["reason"] and message in attempt["reason"], attempt

    opt_out = found["claim-opt-out"]
    assert opt_out["outcome"] == "neutralised"
    assert "VGPUConfigOptOutIgnored" in opt_out["reason"]
    assert "parameters.disableControl ignored" in opt_out["reason"]

    forged = found["forged-claim-allocation"]
    assert forged["outcome"] == "refused"
    assert "ValidatingAdmissionPolicy 'vgpu-claim-allocation-writers'" in forged["reason"]
    assert "alice may not write the allocation of a claim" in forged["reason"]

    # The tenant's own workload still runs, with the limits its template asked for.
    (app,) = report["pods"]
    assert app["phase"] == "Running"
    assert app["containers"]["app"]["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"


def test_legacy_mode_refuses_every_attempt(capsys):
    report = simulate(capsys, "--scenario", str(TAMPER), "--mode", "legacy")
    assert report["exit"] == 0
    found = attempts(report)
    assert {a["outcome"] for a in found.values()} == {"refused"}
    webhook_fields = {
        "env-hamicore-variables-legacy": "spec.containers[0].env[0] (CUDA_DISABLE_CONTROL)",
        "envfrom-without-prefix-legacy": "spec.containers[0].envFrom[0] (prefix '')",
        "hostpath-over-libvgpu-legacy": "spec.containers[0].volumeMounts[0] (/usr/local/vgpu)",
        "hostpath-over-preload-legacy": "spec.containers[0].volumeMounts[0] (/etc/ld.so.preload)",
        "privileged-sidecar-legacy": "container sidecar is privileged",
        "sys-admin-sidecar-legacy": "spec.containers[1].securityContext.capabilities.add",
    }
    for name, field in webhook_fields.items():
        reason = found[name]["reason"]
        assert reason.startswith(WEBHOOK) and field in reason, (name, reason)

    pod_policy = "ValidatingAdmissionPolicy 'vgpu-hami-pod-annotations'"
    assert pod_policy in found["forged-pod-annotations"]["reason"]
    assert (
        "alice may not set or change hami.io/vgpu-devices-allocated"
        in (found["forged-pod-annotations"]["reason"])
    )
    assert pod_policy in found["pod-created-with-allocation"]["reason"]
    node = found["forged-node-register"]["reason"]
    assert "ValidatingAdmissionPolicy 'vgpu-hami-node-annotations'" in node
    assert "alice may not set or change hami.io/node-nvidia-register on node sim-node-0" in node

    assert found["bind-none"]["reason"] == "HTTP 401: no client certificate and no bearer token"
    assert found["bind-untrusted-certificate"]["reason"].startswith(
        "connection refused in the TLS handshake"
    )
    assert found["bind-other-identity"]["reason"].startswith("HTTP 403: alice is not an allowed")

    # The forged /bind did not move the tenant's pod; the scheduler's own bind did place it.
    (app,) = report["pods"]
    assert app["phase"] == "Running" and app["node"] != "sim-node-2"


def test_an_attempt_that_works_is_allowed_and_exits_1(capsys, tmp_path: Path):
    """The legacy scheduler's own identity may write HAMi's annotations: the policy lets it,
    so the simulation reports the bypass instead of calling it refused."""
    shutil.copy(TAMPER / "00-tenant.yaml", tmp_path / "00-tenant.yaml")
    attempt = {
        "apiVersion": "simulate.vgpu.hami.io/v1alpha1",
        "kind": "TamperAttempt",
        "metadata": {"name": "stolen-scheduler-token"},
        "spec": {
            "description": "a tenant holding the scheduler's token writes an allocation",
            "as": {"serviceAccount": "vgpu-system/vgpu-legacy-scheduler"},
            "patch": {
                "kind": "Pod",
                "name": "tenant-app",
                "body": {"metadata": {"annotations": {"hami.io/vgpu-node": "sim-node-2"}}},
            },
        },
    }
    (tmp_path / "10-attempt.yaml").write_text(yaml.safe_dump(attempt))
    report = simulate(capsys, "--scenario", str(tmp_path), "--mode", "legacy")
    assert report["exit"] == 1
    (found,) = report["attempts"]
    assert found["outcome"] == "ALLOWED"
    assert found["identity"] == "system:serviceaccount:vgpu-system:vgpu-legacy-scheduler"
    assert found["reason"] == "the API server stored the patch"


def test_the_text_report_shows_the_tamper_table(capsys, tmp_path: Path):
    scenario = tmp_path / "bind.yaml"
    scenario.write_text(
        (TAMPER / "00-tenant.yaml").read_text()
        + "\n---\n"
        + yaml.safe_dump(
            {
                "apiVersion": "simulate.vgpu.hami.io/v1alpha1",
                "kind": "TamperAttempt",
                "metadata": {"name": "bind-none"},
                "spec": {
                    "call": {
                        "path": "/bind",
                        "credentials": "none",
                        "pod": "tenant-app",
                        "node": "sim-node-1",
                    }
                },
            }
        )
    )
    assert (
        main(["simulate", *PATIENT, *NVIDIA_ONLY, "--scenario", str(scenario), "--mode", "legacy"])
        == 0
    )
    out = capsys.readouterr().out
    assert "Tamper attempts" in out and "HTTP 401" in out
    assert "1 tamper attempt(s), 0 got through" in out


def test_a_bad_attempt_names_the_document_and_field(capsys, tmp_path: Path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        "apiVersion: simulate.vgpu.hami.io/v1alpha1\nkind: TamperAttempt\n"
        "metadata: {name: no-identity}\nspec: {patch: {kind: Pod, name: x, body: {}}}\n"
    )
    assert main(["simulate", *PATIENT, *NVIDIA_ONLY, "--scenario", str(scenario)]) == 2
    assert "bad.yaml#0 (TamperAttempt no-identity): spec.as" in capsys.readouterr().err


def test_a_call_in_dra_mode_says_to_mark_it_legacy(capsys, tmp_path: Path):
    scenario = tmp_path / "call.yaml"
    scenario.write_text(
        "apiVersion: simulate.vgpu.hami.io/v1alpha1\nkind: TamperAttempt\n"
        "metadata: {name: bind}\n"
        "spec: {call: {path: /bind, credentials: none, pod: p, node: n}}\n"
    )
    assert (
        main(["simulate", *PATIENT, *NVIDIA_ONLY, "--scenario", str(scenario), "--mode", "dra"])
        == 2
    )
    error = capsys.readouterr().err
    assert "call.yaml#0 (TamperAttempt bind): spec.call" in error
    assert "simulate.vgpu.hami.io/modes: legacy" in error
