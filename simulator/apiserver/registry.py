"""The served resource types: adding one is one `ResourceType(...)` line in RESOURCES."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rules import (
    Defaulter,
    Normalizer,
    Validator,
    clear_status,
    default_namespace,
    default_pod,
    normalize_pod,
    validate_pod,
    validate_pod_status,
)
from .rules_admission import validate_binding, validate_policy
from .rules_coordination import normalize_lease, validate_lease
from .rules_events import validate_core_event, validate_event_v1
from .rules_resource import validate_device_class
from .rules_resource_claims import (
    empty_status,
    normalize_claim_template,
    normalize_resource_claim,
    validate_claim_status,
    validate_claim_template,
    validate_resource_claim,
)
from .rules_resource_slices import normalize_resource_slice, validate_resource_slice
from .rules_scheduling import normalize_priority_class, validate_priority_class
from .validation import NameRule, dns_label, dns_subdomain

BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class ResourceType:
    """How one resource behaves; the generic handlers read nothing else."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    short_names: tuple[str, ...] = ()
    fields: frozenset[str] = frozenset()
    name_rule: NameRule = dns_subdomain
    validate: Validator | None = None
    validate_status: Validator | None = None
    on_create: Defaulter | None = None
    normalize: Normalizer | None = None
    """Runs on every write before validation: decoding checks (400), defaults, canonical forms."""
    tracks_generation: bool = True
    create_on_update: bool = False
    graceful_deletion: bool = False
    status_keeps_metadata: bool = False
    """A status write ignores metadata (only resourceclaims/status does, reference §9)."""
    selectable: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selectable", BASE_FIELDS | self.fields)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


STATUS = frozenset({"status"})
RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io"
POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)
EVENTS_V1_FIELDS = frozenset(
    {
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "reason",
        "type",
        "reportingController",
    }
)

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        frozenset({"status", "finalize"}),
        ("ns",),
        frozenset({"status.phase"}),
        dns_label,
        on_create=default_namespace,
        tracks_generation=False,
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        STATUS,
        ("no",),
        frozenset({"spec.unschedulable"}),
        tracks_generation=False,
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        frozenset({"status", "binding", "eviction"}),
        ("po",),
        POD_FIELDS,
        validate=validate_pod,
        validate_status=validate_pod_status,
        on_create=default_pod,
        normalize=normalize_pod,
        graceful_deletion=True,
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        fields=EVENT_FIELDS,
        validate=validate_core_event,
        tracks_generation=False,
        create_on_update=True,
    ),
    ResourceType(
        "", "v1", "configmaps", "ConfigMap", True, short_names=("cm",), tracks_generation=False
    ),
    ResourceType("", "v1", "secrets", "Secret", True, tracks_generation=False),
    ResourceType("", "v1", "services", "Service", True, STATUS, ("svc",), tracks_generation=False),
    ResourceType(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        True,
        short_names=("sa",),
        tracks_generation=False,
    ),
    ResourceType("apps", "v1", "deployments", "Deployment", True, STATUS, ("deploy",)),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, STATUS, ("ds",)),
    ResourceType("batch", "v1", "jobs", "Job", True, STATUS),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, STATUS),
    ResourceType(RBAC, "v1", "roles", "Role", True, tracks_generation=False),
    ResourceType(RBAC, "v1", "rolebindings", "RoleBinding", True, tracks_generation=False),
    ResourceType(RBAC, "v1", "clusterroles", "ClusterRole", False, tracks_generation=False),
    ResourceType(
        RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False, tracks_generation=False
    ),
    ResourceType(
        ADMISSION, "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
        STATUS,
        validate=validate_policy,
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
        validate=validate_binding,
    ),
    ResourceType(
        "",
        "v1",
        "resourcequotas",
        "ResourceQuota",
        True,
        STATUS,
        ("quota",),
        on_create=clear_status,
        tracks_generation=False,
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        fields=EVENTS_V1_FIELDS,
        validate=validate_event_v1,
        tracks_generation=False,
        create_on_update=True,
    ),
    ResourceType(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        False,
        short_names=("pc",),
        validate=validate_priority_class,
        normalize=normalize_priority_class,
    ),
    ResourceType(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        True,
        validate=validate_lease,
        normalize=normalize_lease,
        tracks_generation=False,
        create_on_update=True,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "deviceclasses",
        "DeviceClass",
        False,
        validate=validate_device_class,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "ResourceSlice",
        False,
        fields=frozenset({"spec.nodeName", "spec.driver"}),
        validate=validate_resource_slice,
        normalize=normalize_resource_slice,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        True,
        STATUS,
        validate=validate_resource_claim,
        validate_status=validate_claim_status,
        on_create=empty_status,
        normalize=normalize_resource_claim,
        status_keeps_metadata=True,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        True,
        validate=validate_claim_template,
        normalize=normalize_claim_template,
    ),
)


class Registry:
    """Looks resource types up by (group, version, plural) and by kind for owner references."""

    def __init__(self, resources: tuple[ResourceType, ...] = RESOURCES) -> None:
        self.resources = resources
        self._by_key = {r.key: r for r in resources}
        self.groups: dict[str, list[str]] = {}
        for resource in resources:
            versions = self.groups.setdefault(resource.group, [])
            if resource.version not in versions:
                versions.append(resource.version)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_key.get((group, version, plural))

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [r for r in self.resources if r.group == group and r.version == version]
