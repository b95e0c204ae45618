"""Which of a claim's GPUs and limits each container gets, decided without side effects.

kubelet hands a container the CDI devices of the results whose request it
names (`resources.claims[].request`; all of them when it names the whole
claim), and the runtime applies the spec-wide edits of the claim's spec to
every container that gets any of its devices. libvgpu numbers a container's
limits by its own device order (`CUDA_DEVICE_MEMORY_LIMIT_<i>`), and fixes
them in the shared-region file the first process creates, so a container
that names request `b` must see only `b`'s GPUs, numbered from 0, with a
file of its own.

The containers of the pods that reserved the claim group its requests into
views: the requests one container gets. Views that are equal or disjoint
can be written: each result's CDI device carries its view's visible devices,
cache file and per-ordinal limits, and what every view agrees on goes into
the spec-wide edits. A request no container names is a view of its own.
Views that overlap without being equal cannot: a device's edits are the same
in every container that gets it, so such a claim is refused before any side
effect, naming both containers and the form that works.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_vendors import DraVendor
from dra_driver.objects.pod_claims import container_claim_entries
from kubeletplugin.ascend_env import NpuShare, vnpu_env
from kubeletplugin.prepare_plan import ClaimPlan, base_request
from kubeletplugin.vendor_env import share_env
from libvgpu.cache_paths import CacheLocation
from libvgpu.container_edits import (
    ContainerEdits,
    DeviceShare,
    EnvVar,
    Mount,
    ShareSet,
    build_container_edits,
    order_devices,
)
from libvgpu.settings import LibvgpuPaths

PER_ORDINAL_ENV = re.compile(r"CUDA_DEVICE_(MEMORY|SM)_LIMIT_(\d+)")


@dataclass(frozen=True, slots=True)
class ContainerUse:
    """A container of a reserving pod and what it names of the claim."""

    pod: str
    """`namespace/name`."""

    container: str
    requests: frozenset[str] | None
    """The requests it names; None when it names the whole claim."""

    def describe(self) -> str:
        if self.requests is None:
            named = "the whole claim"
        else:
            plural = "s" if len(self.requests) > 1 else ""
            named = f"request{plural} {', '.join(sorted(self.requests))}"
        return f"pod {self.pod} container {self.container} ({named})"


@dataclass(frozen=True, slots=True)
class ClaimView:
    """Requests whose devices go to the same containers, and the grants they hold."""

    requests: frozenset[str]
    grants: tuple[int, ...]
    """Positions in the plan's grants, in result order."""


@dataclass(frozen=True, slots=True)
class ClaimEdits:
    """libvgpu's edits for a claim laid out for CDI."""

    common: ContainerEdits
    """What every view agrees on: the spec-wide edits."""

    per_grant: tuple[ContainerEdits, ...]
    """One per grant of the plan, in its order: the CDI device's own edits."""


def plan_views(plan: ClaimPlan, uses: Sequence[ContainerUse]) -> tuple[ClaimView, ...]:
    """The claim's views, ordered by their first result; InvalidParameterError when two
    containers get overlapping but different requests."""
    order = list(dict.fromkeys(base_request(grant.request) for grant in plan.grants))
    ours = frozenset(order)
    first_use: dict[frozenset[str], ContainerUse] = {}
    for use in uses:
        named = ours if use.requests is None else use.requests & ours
        if named:
            first_use.setdefault(named, use)
    named_sets = list(first_use)
    for position, named in enumerate(named_sets):
        for other in named_sets[:position]:
            if other & named:
                raise _overlap(plan, first_use[other], first_use[named])
    covered = frozenset().union(*first_use)
    sets = list(first_use) or [ours]
    sets += [frozenset({request}) for request in order if first_use and request not in covered]
    views = [
        ClaimView(
            named,
            tuple(i for i, g in enumerate(plan.grants) if base_request(g.request) in named),
        )
        for named in sets
    ]
    return tuple(sorted(views, key=lambda view: view.grants[0]))


def _overlap(plan: ClaimPlan, earlier: ContainerUse, later: ContainerUse) -> InvalidParameterError:
    return InvalidParameterError(
        f"pod {later.pod} container {later.container}",
        f"{later.describe()} and {earlier.describe()} get overlapping but different "
        f"requests of claim {plan.namespace}/{plan.name} ({plan.uid}); CDI gives a device "
        "the same edits in every container that gets it, so their GPU lists and libvgpu "
        "limits cannot both be right: name the whole claim in every container, or have "
        "each container name requests that no other container names",
    )


def view_cache(cache: CacheLocation, index: int) -> CacheLocation:
    """The shared-region file of the view at `index`: the claim's file for the first,
    `<stem>-<index>` beside it for the others, so limits never mix between views."""
    if index == 0:
        return cache
    stem, suffix = posixpath.splitext(cache.file_name)
    return replace(cache, file_name=f"{stem}-{index}{suffix}")


def _merged_shares(plan: ClaimPlan, view: ClaimView) -> tuple[DeviceShare, ...]:
    """The view's GPUs, each with the sum of its grants (two requests may share a GPU)."""
    merged: dict[str, DeviceShare] = {}
    for grant in (plan.grants[i] for i in view.grants):
        previous = merged.get(grant.gpu.uuid)
        memory = grant.memory_limit_bytes + (previous.memory_limit_bytes or 0 if previous else 0)
        cores = grant.core_limit + (previous.core_limit_percent or 0 if previous else 0)
        merged[grant.gpu.uuid] = DeviceShare(
            grant.gpu.uuid, grant.gpu.index, memory, min(cores, 100) or None
        )
    return tuple(merged.values())


def _view_shares(plan: ClaimPlan, view: ClaimView, cache: CacheLocation) -> ShareSet:
    return ShareSet(
        devices=_merged_shares(plan, view),
        cache=cache,
        policy=plan.policy,
        priority=plan.priority,
        disable_control=plan.disable_control,
    )


def build_claim_edits(
    plan: ClaimPlan, views: Sequence[ClaimView], cache: CacheLocation, paths: LibvgpuPaths
) -> ClaimEdits:
    """Each view's libvgpu edits, split so that a container gets exactly its view's: the
    per-ordinal limits go on the device of their GPU (the pins of ordinals past the view's
    GPUs with the view's other env), env that differs between views on
    every device of the view, the rest (and the mounts, the same for all) spec-wide."""
    per_view_env: list[list[EnvVar]] = []
    per_grant: dict[int, list[EnvVar]] = {}
    mounts: tuple[Mount, ...] = ()
    for index, view in enumerate(views):
        shares = _view_shares(plan, view, view_cache(cache, index))
        edits = build_container_edits(shares, paths)
        mounts = edits.mounts
        ordered = order_devices(shares.devices)
        ordinal_env: dict[str, list[EnvVar]] = {share.uuid: [] for share in ordered}
        view_env = []
        for variable in edits.env:
            match = PER_ORDINAL_ENV.fullmatch(variable.name)
            if match and int(match.group(2)) < len(ordered):
                ordinal_env[ordered[int(match.group(2))].uuid].append(variable)
            else:
                view_env.append(variable)
        per_view_env.append(view_env)
        for i in view.grants:
            per_grant[i] = ordinal_env[plan.grants[i].gpu.uuid]
    common = [v for v in per_view_env[0] if all(v in env for env in per_view_env[1:])]
    for view, env in zip(views, per_view_env, strict=True):
        own = [variable for variable in env if variable not in common]
        for i in view.grants:
            per_grant[i] = own + per_grant[i]
    return ClaimEdits(
        common=ContainerEdits(env=tuple(common), mounts=mounts),
        per_grant=tuple(
            ContainerEdits(env=tuple(per_grant[i]), mounts=()) for i in range(len(plan.grants))
        ),
    )


def _vendor_env(plan: ClaimPlan, view: ClaimView, vendor: DraVendor) -> tuple[EnvVar, ...]:
    """The view's vendor env; an Ascend view also gets its vNPU template (`ascend_env`)."""
    shares = _merged_shares(plan, view)
    env = share_env(vendor, shares)
    if vendor.id != "ascend":
        return env
    products = {grant.gpu.uuid: grant.gpu.product_name for grant in plan.grants}
    npus = [
        NpuShare(share.uuid, products[share.uuid], share.memory_limit_bytes)
        for share in order_devices(shares)
    ]
    return env + vnpu_env(npus, f"{plan.namespace}/{plan.name} ({plan.uid})")


def build_vendor_claim_edits(
    plan: ClaimPlan, views: Sequence[ClaimView], vendor: DraVendor
) -> ClaimEdits:
    """A non-NVIDIA claim's edits: each view's vendor env on every device of the view, and
    nothing spec-wide, so a container gets exactly its view's list and limits (no libvgpu
    mounts: HAMi-core is NVIDIA's)."""
    per_grant: dict[int, ContainerEdits] = {}
    for view in views:
        edits = ContainerEdits(env=_vendor_env(plan, view, vendor), mounts=())
        for i in view.grants:
            per_grant[i] = edits
    return ClaimEdits(
        common=ContainerEdits(env=(), mounts=()),
        per_grant=tuple(per_grant[i] for i in range(len(plan.grants))),
    )


def claim_uses(pod: Mapping[str, Any], pod_name: str, claim: str) -> list[ContainerUse]:
    """What each container of the pod names of the claim (None: the whole claim)."""
    uses = []
    for container, entries in container_claim_entries(pod).items():
        requests = [request for name, request in entries if name == claim]
        if requests:
            named = None if "" in requests else frozenset(requests)
            uses.append(ContainerUse(pod_name, container, named))
    return uses
