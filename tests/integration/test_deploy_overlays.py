"""deploy/: every overlay renders with kustomize, passes the Kubernetes schemas, is
accepted by the API emulator, and wires each mode the way it needs (the extender
stanza, the controller's taint flag, TLS, a binding for every ServiceAccount)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_manifests import DEPLOY, NAMESPACE, OVERLAYS, ROOT, find, render, render_components
from kubernetes_validate.utils import SchemaNotFoundError

from controller.legacy.config import parse_device_config
from dra_driver.engine.vendor_backends.registry import ENABLE_FLAGS, FAMILIES
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer

SCHEMA_VERSIONS = ("1.35.0", "1.37.0")
"""The oldest release the DRA path supports and the newest schemas installed."""

CRD_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
}
"""Kinds of CRDs (cert-manager, prometheus-operator): no schema in kubernetes-validate,
not served by the emulator."""

WORKLOADS = ("Deployment", "DaemonSet", "Job")


def _variants(tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every overlay, and the optional components in the one combination that uses them."""
    variants = {overlay: render(overlay) for overlay in OVERLAYS}
    variants["legacy+cert-manager+servicemonitor"] = render_components(
        tmp_path, ("legacy", "legacy-scheduler", "cert-manager", "monitor-servicemonitor")
    )
    (tmp_path / "webhook-auth").mkdir()
    variants["legacy+webhook-auth"] = render_components(
        tmp_path / "webhook-auth",
        ("legacy", "legacy-scheduler", "certs-job", "legacy-webhook-auth"),
    )
    return variants


def _is_crd(obj: dict[str, Any]) -> bool:
    return (obj["apiVersion"], obj["kind"]) in CRD_KINDS


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_passes_the_kubernetes_schemas(tmp_path: Path, version: str) -> None:
    problems, skipped = [], set()
    for variant, objects in _variants(tmp_path).items():
        for obj in objects:
            if _is_crd(obj):
                skipped.add(obj["kind"])
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except SchemaNotFoundError as error:
                problems.append(f"{variant}: {obj['kind']}: no schema ({error})")
            except kubernetes_validate.ValidationError as error:
                name = obj["metadata"]["name"]
                problems.append(f"{variant}: {obj['kind']} {name}: {error.message}")
    assert not problems, "\n".join(problems)
    # CRD kinds are left to their operators' own validation; they are named, not lost.
    assert skipped == {kind for _, kind in CRD_KINDS}


async def _served_kinds(client: KubeClient, api_version: str) -> dict[str, tuple[str, bool]]:
    """kind -> (plural, namespaced) from the server's discovery, as kubectl looks it up."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    listing = await client.get(base)
    return {
        r["kind"]: (r["name"], r["namespaced"])
        for r in listing["resources"]
        if "/" not in r["name"]
    }


async def _apply(client: KubeClient, obj: dict[str, Any]) -> dict[str, Any]:
    api_version = obj["apiVersion"]
    plural, namespaced = (await _served_kinds(client, api_version))[obj["kind"]]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]
        collection = f"{base}/namespaces/{NAMESPACE}/{plural}"
    else:
        assert "namespace" not in obj["metadata"], f"cluster-scoped {obj['kind']} has a namespace"
        collection = f"{base}/{plural}"
    await client.create(collection, obj)
    return await client.get(object_path(collection, obj["metadata"]["name"]))


@pytest.mark.parametrize("overlay", OVERLAYS)
async def test_overlay_is_accepted_by_the_api_emulator(tmp_path: Path, overlay: str) -> None:
    objects = render(overlay)
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            # The Namespace first, as `kubectl apply` orders it.
            for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
                stored = await _apply(client, obj)
                assert stored["metadata"]["uid"]
                if obj["kind"] != "Namespace":  # the only kind here the emulator defaults
                    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
                    assert {k: stored.get(k) for k in body} == body, obj["metadata"]["name"]
        finally:
            await client.aclose()


def _args(workload: dict[str, Any], container: str) -> list[str]:
    for spec in workload["spec"]["template"]["spec"]["containers"]:
        if spec["name"] == container:
            return list(spec.get("args") or spec.get("command") or [])
    raise AssertionError(f"no container {container}")


def test_controller_allocated_mode_taints_and_runs_two_controllers() -> None:
    dra = render("dra")
    assert "--controller-allocated" in _args(
        find(dra, "DaemonSet", "vgpu-kubelet-plugin"), "plugin"
    )
    controller = find(dra, "Deployment", "vgpu-controller")
    assert controller["spec"]["replicas"] == 2
    assert _args(controller, "controller")[0] == "controller"
    budget = find(dra, "PodDisruptionBudget", "vgpu-controller")
    labels = controller["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["maxUnavailable"] == 1


def test_scheduler_allocated_mode_has_no_controller_and_no_taint() -> None:
    objects = render("dra-scheduler-allocated")
    plugin = find(objects, "DaemonSet", "vgpu-kubelet-plugin")
    assert "--controller-allocated" not in _args(plugin, "plugin")
    assert not [o for o in objects if "controller" in o["metadata"]["name"]]


def _backend_resources(backends) -> set[str]:
    names = set()
    for backend in backends:
        r = backend.adapter.resources
        names |= {n for n in (r.count, r.memory, r.memory_percentage, r.cores, r.priority) if n}
    return names


def _managed(legacy: list[dict[str, Any]]) -> dict[str, bool]:
    config_map = find(legacy, "ConfigMap", "vgpu-kube-scheduler-config")
    (extender,) = yaml.safe_load(config_map["data"]["config.yaml"])["extenders"]
    return {m["name"]: m["ignoredByScheduler"] for m in extender["managedResources"]}


def _device_config(legacy: list[dict[str, Any]]):
    device_config = find(legacy, "ConfigMap", "vgpu-scheduler-device")
    return parse_device_config(yaml.safe_load(device_config["data"]["device-config.yaml"]))


def test_kube_scheduler_extender_manages_every_hami_resource_of_the_device_config() -> None:
    legacy = render("legacy")
    config = _device_config(legacy)
    wanted = _backend_resources(config.backends(ENABLE_FLAGS))
    config_map = find(legacy, "ConfigMap", "vgpu-kube-scheduler-config")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["kind"] == "KubeSchedulerConfiguration"
    (extender,) = config["extenders"]
    assert extender["filterVerb"] == "filter" and extender["bindVerb"] == "bind"
    assert extender["preemptVerb"] == "preempt"
    assert extender["nodeCacheCapable"] is True
    assert "prioritizeVerb" not in extender
    assert _managed(legacy) == dict.fromkeys(wanted, True)
    scheduler_name = config["profiles"][0]["schedulerName"]
    legacy_scheduler = find(legacy, "Deployment", "vgpu-legacy-scheduler")
    assert f"--scheduler-name={scheduler_name}" in _args(legacy_scheduler, "scheduler")


def test_every_registry_family_is_configured_and_its_resources_managed() -> None:
    """Each family of the backend registry has its section in the deployed device
    config (HAMi's chart's default), so a cluster gets every vendor HAMi serves, and
    each resource it reads is among kube-scheduler's managedResources."""
    legacy = render("legacy")
    sections = _device_config(legacy).sections
    assert sections is not None
    managed = _managed(legacy)
    for family in FAMILIES:
        assert family.key in sections, family.key
        backends = family.build(sections[family.key])
        assert backends, family.key
        missing = _backend_resources(backends) - set(managed)
        assert not missing, (family.key, missing)


def test_simulator_device_config_is_the_deployed_one() -> None:
    deployed = DEPLOY / "components" / "legacy" / "device-config.yaml"
    simulated = ROOT / "simulator" / "device-config.yaml"
    assert simulated.read_bytes() == deployed.read_bytes(), (
        f"{simulated} differs from {deployed}: copy the deployed file over it"
    )


def test_extender_and_webhook_reach_the_scheduler_service_over_tls() -> None:
    legacy = render("legacy")
    service = find(legacy, "Service", "vgpu-legacy-scheduler")
    (port,) = service["spec"]["ports"]
    config = yaml.safe_load(
        find(legacy, "ConfigMap", "vgpu-kube-scheduler-config")["data"]["config.yaml"]
    )
    (extender,) = config["extenders"]
    assert extender["enableHTTPS"] is True
    host = f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert extender["urlPrefix"] == f"https://{host}:{port['port']}"
    (webhook,) = find(legacy, "MutatingWebhookConfiguration", "vgpu-legacy-webhook")["webhooks"]
    target = webhook["clientConfig"]["service"]
    assert (target["name"], target["namespace"], target["port"]) == (
        service["metadata"]["name"],
        NAMESPACE,
        port["port"],
    )
    # kube-scheduler trusts the CA that signed the scheduler's serving certificate.
    secret = "vgpu-legacy-scheduler-tls"
    kube_scheduler = find(legacy, "Deployment", "vgpu-kube-scheduler")["spec"]["template"]["spec"]
    mounts = {v["name"]: v for v in kube_scheduler["volumes"]}
    tls_mount = next(
        m for m in kube_scheduler["containers"][0]["volumeMounts"] if m["name"] == "tls"
    )
    assert mounts["tls"]["secret"]["secretName"] == secret
    assert extender["tlsConfig"]["caFile"] == f"{tls_mount['mountPath']}/ca.crt"
    job_args = _args(find(legacy, "Job", "vgpu-certs"), "certs")
    assert f"--secret={secret}" in job_args
    assert "--webhook=vgpu-legacy-webhook" in job_args
    assert f"--service={service['metadata']['name']}" in job_args


def test_cert_manager_component_injects_the_ca_of_the_serving_certificate(tmp_path: Path) -> None:
    objects = render_components(tmp_path, ("legacy", "legacy-scheduler", "cert-manager"))
    certificate = find(objects, "Certificate", "vgpu-legacy-scheduler")
    assert certificate["spec"]["secretName"] == "vgpu-legacy-scheduler-tls"
    assert f"vgpu-legacy-scheduler.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    webhook = find(objects, "MutatingWebhookConfiguration", "vgpu-legacy-webhook")
    annotation = webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == f"{NAMESPACE}/vgpu-legacy-scheduler"


def _flag(args: list[str], name: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{name}=")]
    return value


def _mounted_secret_file(pod: dict[str, Any], container: str, path: str) -> tuple[str, str]:
    """The (Secret, key) that `path` inside `container` of `pod` is read from."""
    (spec,) = [c for c in pod["containers"] if c["name"] == container]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in spec["volumeMounts"]:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix) or "secret" not in volumes[mount["name"]]:
            continue
        secret = volumes[mount["name"]]["secret"]
        relative = path.removeprefix(prefix)
        items = {i["path"]: i["key"] for i in secret.get("items", [])} or {relative: relative}
        return secret["secretName"], items[relative]
    raise AssertionError(f"{path} is not on a Secret volume of {container}")


def test_kube_scheduler_presents_a_client_certificate_the_scheduler_allows(
    tmp_path: Path,
) -> None:
    """The second kube-scheduler sends a client certificate from a Secret that both
    certificate paths issue, with the CN the legacy scheduler lets into /filter and /bind,
    signed by the CA in the file the scheduler checks client certificates against."""
    legacy = render("legacy")
    config = yaml.safe_load(
        find(legacy, "ConfigMap", "vgpu-kube-scheduler-config")["data"]["config.yaml"]
    )
    (extender,) = config["extenders"]
    tls = extender["tlsConfig"]
    kube_scheduler = find(legacy, "Deployment", "vgpu-kube-scheduler")["spec"]["template"]["spec"]
    cert = _mounted_secret_file(kube_scheduler, "kube-scheduler", tls["certFile"])
    key = _mounted_secret_file(kube_scheduler, "kube-scheduler", tls["keyFile"])
    client_secret = cert[0]
    assert (cert, key) == ((client_secret, "tls.crt"), (client_secret, "tls.key"))
    serving_ca = _mounted_secret_file(kube_scheduler, "kube-scheduler", tls["caFile"])
    # certs-job: the Job writes that Secret, with a CN, from the serving Secret's CA.
    job_args = _args(find(legacy, "Job", "vgpu-certs"), "certs")
    assert _flag(job_args, "--client-secret") == client_secret
    common_name = _flag(job_args, "--client-name")
    assert serving_ca == (_flag(job_args, "--secret"), "ca.crt")
    # cert-manager: a Certificate for the same Secret and CN from the serving one's Issuer.
    managed = render_components(tmp_path, ("legacy", "legacy-scheduler", "cert-manager"))
    (client_certificate,) = [
        o
        for o in managed
        if o["kind"] == "Certificate" and o["spec"]["secretName"] == client_secret
    ]
    spec = client_certificate["spec"]
    assert spec["commonName"] == common_name
    assert set(spec["usages"]) == {"client auth", "digital signature"}
    serving_certificate = find(managed, "Certificate", "vgpu-legacy-scheduler")["spec"]
    assert spec["issuerRef"] == serving_certificate["issuerRef"]
    assert serving_certificate["secretName"] == serving_ca[0]
    # The legacy scheduler authenticates, trusts that CA and allows that CN.
    scheduler = find(legacy, "Deployment", "vgpu-legacy-scheduler")
    args = _args(scheduler, "scheduler")
    pod = scheduler["spec"]["template"]["spec"]
    assert _mounted_secret_file(pod, "scheduler", _flag(args, "--client-ca-file")) == serving_ca
    assert common_name in _flag(args, "--allowed-callers").split(",")
    assert "--no-authenticate-callers" not in args


def test_no_workload_turns_caller_authentication_off(tmp_path: Path) -> None:
    for variant, objects in _variants(tmp_path).items():
        for workload in (o for o in objects if o["kind"] in WORKLOADS):
            pod = workload["spec"]["template"]["spec"]
            for container in pod.get("initContainers", []) + pod["containers"]:
                argv = container.get("args", []) + container.get("command", [])
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                where = f"{variant}: {workload['metadata']['name']}/{container['name']}"
                assert "--no-authenticate-callers" not in argv, where
                assert env.get("AUTHENTICATE_CALLERS", "true") == "true", where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_workload_runs_as_a_bound_service_account(overlay: str) -> None:
    objects = render(overlay)
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    bound = {
        subject["name"]
        for o in objects
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in o["subjects"]
        if subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE
    }
    roles = {(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"].endswith("Role")}
    for binding in (o for o in objects if o["kind"].endswith("Binding") and "roleRef" in o):
        ref = binding["roleRef"]
        if not ref["name"].startswith("system:"):
            assert (ref["kind"], ref["name"]) in roles, f"{binding['metadata']['name']}: {ref}"
    for workload in (o for o in objects if o["kind"] in WORKLOADS):
        pod = workload["spec"]["template"]["spec"]
        account = pod.get("serviceAccountName")
        assert account in accounts, f"{workload['kind']} {workload['metadata']['name']}"
        assert account in bound, f"ServiceAccount {account} has no role"


def test_simulator_device_classes_are_the_deployed_ones() -> None:
    deployed = DEPLOY / "components" / "kubelet-plugin" / "deviceclasses.yaml"
    simulated = ROOT / "simulator" / "deviceclasses.yaml"
    assert simulated.read_bytes() == deployed.read_bytes(), (
        f"{simulated} differs from {deployed}: copy the deployed file over it"
    )
