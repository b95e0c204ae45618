"""Ascend in DRA mode end to end: `dra-driver simulate` with Ascend nodes (the family's
Ascend910B3), a claim of 3000 MiB allocated by the real controller from the published
templates and prepared by the real kubelet plugin with the vNPU template named for the
Ascend runtime."""

from __future__ import annotations

import json
from pathlib import Path

from simulate_patience import PATIENT

from dra_driver.cli import main

MIB = 1 << 20
SCENARIO = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: small-npu}
spec:
  spec:
    devices:
      requests:
        - name: npu
          exactly:
            deviceClassName: ascend.vgpu.hami.io
            capacity: {requests: {memory: 3000Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: small}
spec:
  restartPolicy: Never
  resourceClaims: [{name: npu, resourceClaimTemplateName: small-npu}]
  containers:
    - name: app
      image: ubuntu:24.04
      command: [sleep, infinity]
      resources: {claims: [{name: npu}]}
"""


def test_a_3000_mib_claim_holds_the_smallest_template_and_names_it(tmp_path: Path, capsys):
    scenario = tmp_path / "small-npu.yaml"
    scenario.write_text(SCENARIO)
    flags = ["--vendors", "ascend", "--vendor-nodes", "1", "--scenario", str(scenario)]
    status = main(["simulate", *PATIENT, "-o", "json", *flags])
    report = json.loads(capsys.readouterr().out)

    assert status == 0
    (pod,) = [p for p in report["pods"] if p["name"] == "small"]
    assert pod["phase"] == "Running", pod["reason"]
    (share,) = [s for g in report["gpus"] for s in g["shares"] if "small" in s["pods"]]
    assert (share["memoryBytes"], share["cores"]) == (16384 * MIB, 0)
    env = pod["containers"]["app"]["env"]
    assert env["ASCEND_VNPU_SPECS"] == "vir05_1c_16g"
    assert env["VGPU_SHARE_MEMORY_LIMIT_0"] == "16384m"
    assert share["enforcedBy"] == "Ascend runtime (vNPU template)"
