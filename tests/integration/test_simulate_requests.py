"""The simulation's kubelet hands each container the devices of the requests it names,
as kubelet does, so the report shows the limits each container really gets."""

from __future__ import annotations

import json
from pathlib import Path

from simulator.run import run_simulation
from simulator.settings import SimulationSettings

SCENARIO = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-requests}
spec:
  spec:
    devices:
      requests:
        - name: a
          exactly: {deviceClassName: nvidia.vgpu.hami.io, capacity: {requests: {memory: 1Gi}}}
        - name: b
          exactly: {deviceClassName: nvidia.vgpu.hami.io, capacity: {requests: {memory: 2Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: split}
spec:
  restartPolicy: Never
  resourceClaims: [{name: gpu, resourceClaimTemplateName: two-requests}]
  containers:
    - {name: only-a, image: cuda, resources: {claims: [{name: gpu, request: a}]}}
    - {name: only-b, image: cuda, resources: {claims: [{name: gpu, request: b}]}}
"""
WHOLE_CLAIM_CONTAINER = """    - {name: whole, image: cuda, resources: {claims: [{name: gpu}]}}
"""


def test_containers_naming_requests_are_refused_beside_one_naming_the_whole_claim(
    capsys, tmp_path: Path
):
    scenario = tmp_path / "mixed.yaml"
    scenario.write_text(SCENARIO + WHOLE_CLAIM_CONTAINER)
    assert run_simulation(SimulationSettings(scenario=(scenario,)), "json") == 0
    (pod,) = json.loads(capsys.readouterr().out)["pods"]
    assert pod["phase"] != "Running"
    assert "container whole (the whole claim)" in pod["reason"]


def test_each_container_naming_one_request_is_reported_with_its_own_limit(capsys, tmp_path: Path):
    scenario = tmp_path / "split.yaml"
    scenario.write_text(SCENARIO)
    assert run_simulation(SimulationSettings(scenario=(scenario,)), "json") == 0
    (pod,) = json.loads(capsys.readouterr().out)["pods"]
    assert pod["phase"] == "Running", json.dumps(pod)
    env = {name: container["env"] for name, container in pod["containers"].items()}
    assert env["only-a"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"
    assert env["only-b"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
    for container in ("only-a", "only-b"):
        assert env[container]["CUDA_DEVICE_MEMORY_LIMIT_1"] == "0"
        assert "," not in env[container]["NVIDIA_VISIBLE_DEVICES"]
