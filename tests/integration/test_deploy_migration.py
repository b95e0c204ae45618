"""deploy/components/migration: the /migrate webhook entries select only opted-in pods and
namespaces, sort before the legacy webhook, and point at the legacy scheduler's service;
its RBAC lets that ServiceAccount write the templates."""

from __future__ import annotations

from pathlib import Path

from deploy_manifests import find, render_components

from controller.migration.webhook import MIGRATE_PATH
from dra_driver.objects.migration import MIGRATE_LABEL

COMPONENTS = ("legacy", "legacy-scheduler", "migration")


def test_migrate_webhook_selects_opted_in_pods_and_runs_before_the_legacy_one(
    tmp_path: Path,
) -> None:
    objects = render_components(tmp_path, COMPONENTS)
    configs = sorted(
        o["metadata"]["name"] for o in objects if o["kind"] == "MutatingWebhookConfiguration"
    )
    assert configs[0] == "vgpu-dra-migrate"
    assert "vgpu-legacy-webhook" in configs
    migrate = find(objects, "MutatingWebhookConfiguration", "vgpu-dra-migrate")
    by_namespace, by_pod = migrate["webhooks"]
    assert by_namespace["namespaceSelector"] == {"matchLabels": {MIGRATE_LABEL: "true"}}
    assert by_pod["objectSelector"] == {"matchLabels": {MIGRATE_LABEL: "true"}}
    for hook in migrate["webhooks"]:
        assert hook["clientConfig"]["service"]["path"] == MIGRATE_PATH
        assert hook["clientConfig"]["service"]["name"] == "vgpu-legacy-scheduler"
        assert hook["sideEffects"] == "NoneOnDryRun"


def test_the_legacy_scheduler_may_write_templates(tmp_path: Path) -> None:
    objects = render_components(tmp_path, COMPONENTS)
    role = find(objects, "ClusterRole", "vgpu-migration")
    templates = next(r for r in role["rules"] if "resourceclaimtemplates" in r["resources"])
    assert "create" in templates["verbs"]
    binding = find(objects, "ClusterRoleBinding", "vgpu-migration")
    assert binding["subjects"][0]["name"] == "vgpu-legacy-scheduler"
