"""`dra-driver explain`: where would this workload go, and why not elsewhere?

Pure planning over an Inventory: build the request, run the engine over every
node so each refusal has its reason, and render the decision as text for a
person or JSON for a tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.engine.engine import Decision, Engine, EngineSettings
from dra_driver.engine.reasons import summarize_failures
from dra_driver.engine.requests import PodRequest
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.explain.inventory_file import Inventory
from dra_driver.objects.pod_workloads import pod_request


@dataclass(frozen=True, slots=True)
class Explanation:
    """A decision together with the names it should be shown under."""

    workload: str
    request: PodRequest
    container_names: tuple[str, ...]
    decision: Decision


def workload_request(
    document: Mapping[str, Any], vendors: VendorRegistry
) -> tuple[PodRequest, tuple[str, ...]]:
    """The engine request for a Pod or a ResourceClaim, with display names per container."""
    if not isinstance(document, Mapping):
        raise InvalidParameterError("workload", "expected a Pod or ResourceClaim object")
    kind = document.get("kind")
    if kind == "Pod":
        spec = document.get("spec") or {}
        names = tuple(
            f"{'init:' if key == 'initContainers' else ''}{c.get('name', f'#{i}')}"
            for key in ("initContainers", "containers")
            for i, c in enumerate(spec.get(key) or [])
        )
        return pod_request(document, vendors), names
    if kind == "ResourceClaim":
        from dra_driver.objects.claim_workloads import claim_request

        return claim_request(document, vendors)
    raise InvalidParameterError("workload.kind", f"expected Pod or ResourceClaim, got {kind!r}")


def explain(
    inventory: Inventory, document: Mapping[str, Any], vendors: VendorRegistry
) -> Explanation:
    request, names = workload_request(document, vendors)
    settings = EngineSettings(
        gpu_policy=inventory.policies.gpu, node_policy=inventory.policies.node
    )
    engine = Engine(
        inventory.nodes, inventory.usage, settings=settings, vendors=vendors, quota=inventory.quota
    )
    decision = engine.decide(request, explain_all=True)
    return Explanation(f"{request.namespace}/{request.name}", request, names, decision)


def as_json(explanation: Explanation) -> dict[str, Any]:
    placement = explanation.decision.placement
    result: dict[str, Any] = {
        "workload": explanation.workload,
        "fits": placement is not None,
        "node": placement.node if placement else None,
        "containers": [],
        "reasons": dict(sorted(explanation.decision.failures.items())),
        "dropped": list(explanation.request.dropped),
    }
    if placement is None:
        result["summary"] = summarize_failures(explanation.decision.failures)
        return result
    for position, grants in enumerate(placement.containers):
        result["containers"].append(
            {
                "name": explanation.container_names[position],
                "init": position < placement.init_count,
                "devices": [
                    {
                        "id": grant.uuid,
                        "vendor": grant.vendor,
                        "index": grant.index,
                        "memoryMiB": grant.memory_mib,
                        "cores": grant.cores,
                    }
                    for grant in grants
                ],
            }
        )
    return result


def as_text(explanation: Explanation) -> str:
    data = as_json(explanation)
    lines = []
    if data["fits"]:
        lines.append(f"{data['workload']} -> node {data['node']}")
        for container in data["containers"]:
            if not container["devices"]:
                lines.append(f"  {container['name']}: no devices")
            for device in container["devices"]:
                lines.append(
                    f"  {container['name']}: {device['id']} (index {device['index']}, "
                    f"{device['vendor']}) memory {device['memoryMiB']} MiB, "
                    f"cores {device['cores']}%"
                )
        if data["reasons"]:
            lines.append("other nodes refused:")
    else:
        lines.append(f"{data['workload']} fits nowhere: {data['summary']}")
    lines.extend(f"  {node}: {reason}" for node, reason in data["reasons"].items())
    if data["dropped"]:
        lines.append("requests ignored, as HAMi ignores them:")
        lines.extend(f"  {why}" for why in data["dropped"])
    return "\n".join(lines)


def render(explanation: Explanation, output: str) -> str:
    if output == "json":
        return json.dumps(as_json(explanation), indent=2)
    return as_text(explanation)
