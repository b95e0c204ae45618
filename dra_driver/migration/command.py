"""`dra-driver migrate plan`: a dry run listing what each HAMi workload would become in DRA.

Reads the cluster once (kubeconfig): pods and the pod templates of
Deployments, StatefulSets, DaemonSets and Jobs, all namespaces or one. Writes
nothing. The device config is HAMi's `device-config.yaml` (or the ConfigMap
holding it), as the legacy scheduler reads it, with every vendor switched on
so that each vendor's resources are recognised. The Kubernetes client and
rich are imported inside functions, so `dra-driver --help` loads neither.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dra_driver.cli.registration import Subcommands
from dra_driver.engine.vendor_backends.registry import (
    ENABLE_FLAGS,
    BackendRegistry,
    build_backends,
    read_sections,
)
from dra_driver.errors import InvalidParameterError
from dra_driver.migration.plan import WorkloadPlan, build_plan
from dra_driver.objects.migration import POD_CLAIM_NAME
from dra_driver.objects.yaml_files import read_yaml_document

if TYPE_CHECKING:
    from rich.console import Console

    from dra_driver.kube.rest import KubeClient

COLLECTIONS = {
    "Pod": ("/api/v1", "pods"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "DaemonSet": ("/apis/apps/v1", "daemonsets"),
    "Job": ("/apis/batch/v1", "jobs"),
}
PIPED_WIDTH = 160
CONFIG_MAP_KEY = "device-config.yaml"
DEPLOYED_CONFIG_MAP = "/api/v1/namespaces/vgpu-system/configmaps/vgpu-scheduler-device"
"""The device config deploy/ gives the legacy scheduler: what the plan reads by default, so
it sees the vendors the cluster's scheduler serves."""


def register(commands: Subcommands) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="move HAMi device-plugin workloads to DRA claims",
        description="Tools for migrating nvidia.com/gpu* (and other vendors') workloads to DRA.",
    )
    actions = migrate.add_subparsers(dest="migrate_action", required=True, metavar="ACTION")
    plan = actions.add_parser(
        "plan",
        help="dry run: each workload, what it would become, what cannot be migrated and why",
    )
    plan.add_argument("--namespace", "-n", env="MIGRATE_NAMESPACE", help="only this namespace")
    plan.add_argument(
        "-o", "--output", choices=("text", "json"), env="MIGRATE_OUTPUT", default="text"
    )
    plan.add_argument(
        "--device-config-file",
        type=Path,
        env="DEVICE_CONFIG_FILE",
        help="HAMi device-config.yaml, or the ConfigMap holding it (default: the cluster's "
        "vgpu-system/vgpu-scheduler-device ConfigMap, else HAMi's defaults)",
    )
    plan.add_argument(
        "--kubeconfig",
        type=Path,
        env="KUBECONFIG",
        default=Path.home() / ".kube" / "config",
        help="kubeconfig file",
    )
    plan.set_defaults(handler=_plan)


def load_backends(path: Path | None) -> BackendRegistry:
    """Every vendor of the device config (None: HAMi's defaults), all `--enable-*` on."""
    if path is None:
        return build_backends(None, ENABLE_FLAGS)
    return backends_from_document(read_yaml_document(path), str(path))


def backends_from_document(document: Any, where: str) -> BackendRegistry:
    """The vendors of a device-config document, or of the ConfigMap that holds one."""
    if isinstance(document, dict) and document.get("kind") == "ConfigMap":
        inner = (document.get("data") or {}).get(CONFIG_MAP_KEY)
        if inner is None:
            raise InvalidParameterError(f"{where}: data", f"has no {CONFIG_MAP_KEY} key")
        try:
            document = yaml.safe_load(inner)
        except yaml.YAMLError as error:
            raise InvalidParameterError(f"{where}: data", f"not valid YAML: {error}") from None
    return build_backends(read_sections(document, where), ENABLE_FLAGS)


async def deployed_backends(client: KubeClient) -> BackendRegistry | None:
    """The vendors of the deployed scheduler's device config, None when it is not there."""
    from dra_driver.kube.rest import NotFoundError

    try:
        config_map = await client.get(DEPLOYED_CONFIG_MAP)
    except NotFoundError:
        return None
    return backends_from_document(config_map, DEPLOYED_CONFIG_MAP)


def _plan(args: argparse.Namespace) -> int:
    backends = None if args.device_config_file is None else load_backends(args.device_config_file)
    return asyncio.run(run_plan(args.kubeconfig, backends, args.namespace, args.output))


async def fetch_plan(
    client: KubeClient, backends: BackendRegistry, namespace: str | None = None
) -> list[WorkloadPlan]:
    """One list per kind, read concurrently, narrowed to `namespace` when given."""

    def path(kind: str) -> str:
        group, plural = COLLECTIONS[kind]
        return f"{group}/namespaces/{namespace}/{plural}" if namespace else f"{group}/{plural}"

    from dra_driver.kube.rest import NotFoundError

    async def listed(kind: str) -> dict[str, Any]:
        try:
            return await client.list(path(kind))
        except NotFoundError:
            return {}  # an API group the cluster does not serve has no workloads

    lists = await asyncio.gather(*(listed(kind) for kind in COLLECTIONS))
    items = {
        kind: listed.get("items") or [] for kind, listed in zip(COLLECTIONS, lists, strict=True)
    }
    return build_plan(items, backends)


async def run_plan(
    kubeconfig: Path | None, backends: BackendRegistry | None, namespace: str | None, output: str
) -> int:
    """`backends` None: the deployed device config's vendors, else HAMi's defaults (said
    on stderr, since vendors missing from the defaults are then not planned)."""
    from rich.console import Console

    from dra_driver.kube.rest import KubeClient

    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        if backends is None:
            backends = await deployed_backends(client)
        if backends is None:
            sys.stderr.write(
                f"no {DEPLOYED_CONFIG_MAP.rsplit('/', 1)[-1]} ConfigMap in vgpu-system: planning "
                "with HAMi's default device config (pass --device-config-file for yours)\n"
            )
            backends = load_backends(None)
        plans = await fetch_plan(client, backends, namespace)
    finally:
        await client.aclose()
    if output == "json":
        sys.stdout.write(json.dumps([p.to_data() for p in plans], indent=2) + "\n")
    else:
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        render_text(plans, Console(file=sys.stdout, width=width))
    return 0


def _sizes(request: dict[str, Any]) -> str:
    parts = [f"{request['count']}x"]
    if request["memoryMiB"] is not None:
        parts.append(f"{request['memoryMiB']} MiB")
    if "memoryPercentage" in request["config"]:
        parts.append(f"{request['config']['memoryPercentage']}% memory")
    if request["cores"] is not None:
        parts.append(f"{request['cores']}% cores")
    return " ".join(parts)


def render_text(plans: list[WorkloadPlan], console: Console) -> None:
    """One row per claim request (or per reason a workload cannot move), as `status` does."""
    from rich.table import Table

    table = Table(title="migration plan (dry run)", show_lines=False)
    for column in ("namespace", "workload", "container", "becomes"):
        table.add_column(column, no_wrap=True)
    table.add_column("selectors / config", overflow="fold")
    table.add_column("note", overflow="fold")
    for plan in plans:
        data = plan.to_data()
        workload = f"{plan.kind}/{plan.name}"
        if data["migrated"]:
            table.add_row(
                plan.namespace,
                workload,
                "",
                "[green]migrated[/green]",
                "",
                f"claim {POD_CLAIM_NAME} from {data['template']}",
            )
            continue
        if not plan.migration.translatable:
            for problem in data["problems"]:
                table.add_row(
                    plan.namespace,
                    workload,
                    "",
                    "[red]not migrated[/red]",
                    "",
                    f"{problem['field']}: {problem['reason']}",
                )
            continue
        for request in data["requests"]:
            extras = [*request["selectors"], *(f"{k}={v}" for k, v in request["config"].items())]
            table.add_row(
                plan.namespace,
                workload,
                request["container"],
                f"{request['deviceClass']} {_sizes(request)}",
                "\n".join(extras),
                f"template {data['template']}",
            )
    if plans:
        console.print(table)
    else:
        console.print("no workload asks for HAMi devices")
