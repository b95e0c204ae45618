"""`migrate plan`'s model: each workload's HAMi requests and what each would become. Pure.

A workload is a bare pod (one no controller owns) or the pod template of a
Deployment, StatefulSet, DaemonSet or Job: the controller's pods are what the
webhook would see, so their template is what would be migrated. Every answer
is `dra_driver.objects.migration`'s, the one the `/migrate` webhook gives. A
workload migrated already (it holds the migration's claim and no HAMi request)
is listed as done, so the plan shows progress rather than failures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.objects.migration import (
    PodMigration,
    build_claim_spec,
    plan_migration,
    template_name,
)

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    """One workload and its migration (only workloads that ask for HAMi devices, or did
    and were migrated)."""

    namespace: str
    kind: str
    name: str
    migration: PodMigration

    @property
    def template(self) -> str | None:
        """The ResourceClaimTemplate the webhook would write, or the one a migrated
        workload's claim comes from; None when not translatable."""
        if self.migration.migrated_to is not None:
            return self.migration.migrated_to
        if not self.migration.translatable:
            return None
        return template_name(build_claim_spec(self.migration))

    def to_data(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "kind": self.kind,
            "name": self.name,
            "translatable": self.migration.translatable,
            "migrated": self.migration.migrated_to is not None,
            "template": self.template,
            "requests": [
                {
                    "name": plan.name,
                    "container": plan.container,
                    "deviceClass": plan.device_class,
                    "count": plan.count,
                    "memoryMiB": plan.memory_mib,
                    "cores": plan.cores,
                    "selectors": list(plan.selectors),
                    "config": dict(plan.config),
                }
                for plan in self.migration.requests
            ],
            "problems": [
                {"field": problem.field, "reason": problem.reason}
                for problem in self.migration.problems
            ],
        }


def _pod_of(item: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The pod the webhook would be asked about: the item, or its controller's template."""
    if kind == "Pod":
        return item
    template = (item.get("spec") or {}).get("template") or {}
    metadata = {
        **(template.get("metadata") or {}),
        "namespace": (item.get("metadata") or {}).get("namespace"),
        "name": (item.get("metadata") or {}).get("name"),
    }
    return {**template, "metadata": metadata}


def build_plan(
    items: Mapping[str, Iterable[Mapping[str, Any]]], backends: BackendRegistry
) -> list[WorkloadPlan]:
    """Plans for every workload asking for HAMi devices, by namespace, kind and name.

    `items` holds the listed objects by kind (`Pod` and `WORKLOAD_KINDS`); pods a
    controller owns are skipped, their controller's template stands for them."""
    plans = []
    for kind, objects in items.items():
        for item in objects:
            metadata = item.get("metadata") or {}
            if kind == "Pod" and metadata.get("ownerReferences"):
                continue
            migration = plan_migration(_pod_of(item, kind), backends)
            if migration.needed or migration.migrated_to is not None:
                plans.append(
                    WorkloadPlan(
                        metadata.get("namespace") or "", kind, metadata.get("name") or "", migration
                    )
                )
    return sorted(plans, key=lambda p: (p.namespace, p.kind, p.name))
