"""Decide where a pod's claims go: node predicates, the engine, request policies. Pure.

The engine is the controller's own view of the cluster (inventory minus
usage); deciding never writes anything. A variant (firstAvailable choice,
matchAttribute value) is tried in order; a node none of whose devices'
requestPolicy serves a request (as kube-scheduler decides it) is refused before
the engine is asked; a node the engine picks but whose devices cannot serve the
request policy or a distinctAttribute constraint is dropped and the engine asked
again, so the answer is always a placement that can be written as it is, or the
per-node reasons why none exists. A policy refusal's words (claim, request,
capacity, amount, policy) are said once, ahead of the per-node reasons.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from controller.allocation import PlannedResult, plan_results, refusal_note
from controller.inventory import Inventory, partition_vendor
from controller.partition_inventory import CounterUsage
from controller.partition_quota import DeviceKey, PartitionQuota
from controller.partitions import PartitionFit, PartitionRefusal, fit_on_node, node_order
from controller.requests import PodVariant
from dra_driver.engine.engine import Engine, Placement
from dra_driver.engine.policy import parse_gpu_policy, parse_node_policy
from dra_driver.engine.reasons import NODE_HAS_NO_DEVICES, summarize_failures
from dra_driver.objects.capacity_policy import CAPACITY_REFUSED

DISTINCT_ATTRIBUTE_CONFLICT = "DistinctAttributeConstraintNotMet"
MAX_EVENT_MESSAGE = 1024
"""events.k8s.io/v1 refuses a longer note; core Events are kept to the same size."""


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """The node, the variant chosen, the engine placement and each claim's results."""

    node: str
    variant: PodVariant
    placement: Placement
    results: Sequence[Sequence[PlannedResult]]


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why no node fits: per node, HAMi's `k/N Reason` or a node predicate; `notes` say
    what a short reason (a requestPolicy refusal) stands for."""

    reasons: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return no_fit_message(self.reasons, self.notes)


def no_fit_message(reasons: Mapping[str, str], notes: Sequence[str] = ()) -> str:
    """HAMi's FilteringFailed summary, the notes, then each node's own reasons, bounded
    in size."""
    head = summarize_failures(reasons)
    details = "; ".join(f"{node}: {reason}" for node, reason in sorted(reasons.items()))
    return bounded_message(". ".join(part for part in (head, *notes, details) if part))


def bounded_message(text: str) -> str:
    """The text cut to what an event's note may hold, marked with "..." when cut."""
    return text if len(text) <= MAX_EVENT_MESSAGE else text[: MAX_EVENT_MESSAGE - 3] + "..."


def _distinct_conflict(variant: PodVariant, results: Sequence[Sequence[PlannedResult]]) -> bool:
    for claim_variant, claim_results in zip(variant.claims, results, strict=True):
        devices = (claim_variant.claim.get("spec") or {}).get("devices") or {}
        for constraint in devices.get("constraints") or []:
            attribute = constraint.get("distinctAttribute")
            if not attribute:
                continue
            scope = set(constraint.get("requests") or ())
            values = [
                repr(r.device.attribute(attribute))
                for r in claim_results
                if not scope or r.request in scope or r.request.split("/")[0] in scope
            ]
            if len(values) != len(set(values)):
                return True
    return False


def decide_pod(
    engine: Engine,
    variants: Sequence[PodVariant],
    inventory: Inventory,
    candidates: Collection[str],
    refused: Mapping[str, str],
    partitions: CounterUsage | None = None,
) -> PodAllocation | NoFit:
    """The first variant that fits on a candidate node, or every node's reasons.

    `candidates` are the inventory nodes that pass the pod's node predicates;
    `refused` holds the reason of every node that did not (reported as is).
    `partitions` is what the allocated MIG partitions hold; without it, a variant
    with a partition request fits nowhere.
    """
    first: NoFit | None = None
    for variant in variants:
        notes: dict[str, None] = {}
        failures = _policy_refusals(variant, candidates, notes)
        allowed = set(candidates) - failures.keys()
        fits: dict[str, PartitionFit] | None = None
        if any(claim.partitions for claim in variant.claims):
            fits = _partition_fits(engine, variant, inventory, allowed, partitions, failures, notes)
            allowed &= fits.keys()
            if not variant.request.containers and allowed:
                node = next(iter(fits))
                placement = Placement(node, (), 0.0)
                return PodAllocation(
                    node, variant, placement, _partition_results(variant, fits[node], inventory)
                )
        while allowed:
            decision = engine.decide(variant.request, allowed)
            placement = decision.placement
            if placement is None:
                failures.update(decision.failures)
                break
            planned = plan_results(variant, placement, inventory)
            if isinstance(planned, str):
                failures[placement.node] = CAPACITY_REFUSED
                notes[planned] = None
            elif _distinct_conflict(variant, planned):
                failures[placement.node] = DISTINCT_ATTRIBUTE_CONFLICT
            else:
                if fits is not None:
                    extra = _partition_results(variant, fits[placement.node], inventory)
                    planned = [[*own, *more] for own, more in zip(planned, extra, strict=True)]
                return PodAllocation(placement.node, variant, placement, planned)
            allowed.discard(placement.node)
        if first is None:
            first = NoFit(failures, tuple(notes))
    first = first or NoFit()
    return NoFit({**refused, **first.reasons}, first.notes)


def _partition_fits(
    engine: Engine,
    variant: PodVariant,
    inventory: Inventory,
    allowed: Collection[str],
    usage: CounterUsage | None,
    failures: dict[str, str],
    notes: dict[str, None],
) -> dict[str, PartitionFit]:
    """Where the variant's partition requests fit, in node-policy order: only the first
    node when the variant has nothing else (the engine picks among them otherwise);
    the others' refusals go to `failures` and `notes`."""
    requests = [p for claim in variant.claims for p in claim.partitions]
    node_policy = parse_node_policy(variant.request.node_policy or engine.settings.node_policy)
    gpu_policy = parse_gpu_policy(variant.request.gpu_policy or engine.settings.gpu_policy)
    quota = partition_quota(engine, variant, inventory)
    fits: dict[str, PartitionFit] = {}
    for node in node_order(allowed, inventory, usage or CounterUsage(), node_policy):
        outcome: PartitionFit | PartitionRefusal = (
            fit_on_node(requests, inventory, usage, node, gpu_policy.binpack, quota)
            if usage is not None
            else PartitionRefusal(NODE_HAS_NO_DEVICES, "")
        )
        if isinstance(outcome, PartitionRefusal):
            failures[node] = outcome.reason
            if outcome.note:
                notes[outcome.note] = None
            continue
        fits[node] = outcome
        if not variant.request.containers:
            break
    return fits


def partition_quota(
    engine: Engine, variant: PodVariant, inventory: Inventory
) -> PartitionQuota | None:
    """The pod's namespace quota as partitions are charged to it; None when it has none."""
    ledger = engine.quota
    namespace = variant.request.namespace
    if ledger is None or not any(key[0] == namespace for key in ledger.quotas):
        return None

    def vendor_of(key: DeviceKey) -> str | None:
        return partition_vendor(key, inventory, engine.vendors)

    return PartitionQuota(ledger, namespace, vendor_of, inventory.counter_sets)


def _partition_results(
    variant: PodVariant, fit: PartitionFit, inventory: Inventory
) -> list[list[PlannedResult]]:
    """Per claim, a whole-device result (no consumedCapacity) for each partition taken
    for one of its requests."""
    return [
        [
            PlannedResult(request.name, inventory.partition_devices[device.key], None)
            for request, device in fit.picks
            if any(request is own for own in claim.partitions)
        ]
        for claim in variant.claims
    ]


def _policy_refusals(
    variant: PodVariant, candidates: Collection[str], notes: dict[str, None]
) -> dict[str, str]:
    """The candidates where some request has no device whose requestPolicy serves it,
    adding what each refusal says to `notes`."""
    refusing = [
        (claim_variant, name, screen)
        for claim_variant in variant.claims
        # A variant built without a RequestContext has no screens: nothing is refused.
        for name, screen in zip(claim_variant.result_names, claim_variant.screens, strict=False)
        if screen.nodes
    ]
    failures: dict[str, str] = {}
    nodes = set(candidates) if refusing else set()
    for claim_variant, name, screen in refusing:
        for node in screen.nodes.keys() & nodes:
            failures[node] = CAPACITY_REFUSED
            notes[refusal_note(claim_variant.claim, name, screen.nodes[node])] = None
    return failures
