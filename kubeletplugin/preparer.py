"""NodePrepareResources / NodeUnprepareResources, claim by claim.

Idempotent and crash-safe: under the claim's lock, a completed claim returns
what was recorded (rewriting its CDI spec if a reboot wiped it); otherwise
PrepareStarted is checkpointed before any side effect, the cache dir and CDI
spec are written, and PrepareCompleted is checkpointed last. A claim left in
PrepareStarted by a crash is rolled back and redone. A claim of MIG partitions
takes the same steps with its instances (`mig_prepare`). Different claims run
concurrently; every checkpoint update goes through one lock so none is lost.

Before any side effect, prepare refuses what would break at container start
or give wrong limits: a container (found through the pods in
`status.reservedFor`) that uses two claims of this driver, containers that
name overlapping but different requests of the claim (`claim_layout`), and
a node without the libvgpu files the spec mounts.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cdi.naming import validate_claim_uid
from cdi.spec import NVIDIA_CONTROL_DEVICE_NODES, ClaimDeviceEdits, build_claim_spec
from cdi.writer import CdiSpecWriter
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.kube.events import NORMAL, WARNING, EventRecorder, involved_object
from dra_driver.kube.rest import ApiError, KubeClient, NotFoundError, object_path
from dra_driver.objects.dra_vendors import NVIDIA
from dra_driver.objects.enforcement_events import ENFORCEMENT_DISABLED, OPT_OUT_IGNORED
from dra_driver.objects.pod_claims import container_claims, reserving_pods
from kubeletplugin.amdsmi_backend import AMD
from kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointFile,
    ClaimRecord,
    PreparedDevice,
    PrepareState,
)
from kubeletplugin.claim_checks import ClaimRef, checked_ref, refuse_tampering
from kubeletplugin.claim_layout import (
    ClaimView,
    ContainerUse,
    build_claim_edits,
    build_vendor_claim_edits,
    claim_uses,
    plan_views,
)
from kubeletplugin.host_files import (
    AMD_CONTROL_DEVICE_NODES,
    amd_device_nodes,
    check_libvgpu_files,
    host_amd_device_nodes,
    host_device_nodes,
)
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.mig_plan import PartitionPlan
from kubeletplugin.mig_prepare import MigPartitions
from kubeletplugin.mixed_reads import MixedReadError, fetch_node_pods
from kubeletplugin.mixed_usage import PreparedShare, prepare_overcommit
from kubeletplugin.orphans import orphan_claims
from kubeletplugin.prepare_plan import (
    ClaimPlan,
    DeviceCapacity,
    DeviceGrant,
    base_request,
    overcommitted,
    plan_claim,
    plan_vendor,
)
from kubeletplugin.state_refusal import StateRefusal
from kubeletplugin.usage_ledger import UsageLedger, record_holdings
from libvgpu.cache_dirs import CacheDirError, CacheDirSettings, create_cache_dir, remove_cache_dir
from libvgpu.cache_paths import CLAIMS_DIR, claim_cache_location
from libvgpu.settings import LibvgpuPaths

log = logging.getLogger(__name__)

PREPARED, IN_FLIGHT = "prepared", "in flight"
"""A claim's two holdings in the ledger: its record's devices, its grants before completion."""

EVENT_REASON_UNCHARGED = "VGPUConfigNotCharged"
EVENT_REASON_OPT_OUT_IGNORED = OPT_OUT_IGNORED
EVENT_REASON_ENFORCEMENT_DISABLED = ENFORCEMENT_DISABLED


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""
    pods: tuple[str, ...] = ()
    """`namespace/name` of the pods that reserved the claim, for the log."""


CLAIM_READ_TIMEOUT_S = 20.0
"""Well inside kubelet's 45 s NodePrepareResources deadline: a claim read that hangs
fails that claim alone, with a message saying so, and leaves the claim's other work
(pod reads, CDI spec, checkpoint) time to finish before kubelet gives up on the call."""


@dataclass(frozen=True, slots=True)
class PreparerSettings:
    driver: str
    node_name: str
    libvgpu: LibvgpuPaths = field(default_factory=LibvgpuPaths)
    cache_dirs: CacheDirSettings = field(default_factory=CacheDirSettings)
    with_device_nodes: bool = True
    """False for mock GPUs, and when the NVIDIA CDI device supplies the device nodes."""
    dev_dir: Path = Path("/dev")
    """Where the host's device nodes are, as the container runtime sees them."""
    nvidia_cdi_prefix: str | None = None
    """e.g. `nvidia.com/gpu`: also return `<prefix>=<uuid>` for each device."""
    claim_read_timeout_s: float = CLAIM_READ_TIMEOUT_S
    """Longest wait for the API server to answer one claim read, seconds."""
    allow_claim_opt_out: bool = False
    """Honour `disableControl` / `coreLimitPolicy: disable` from a claim's own config."""
    mixed_mode: bool = False
    """The device plugin serves these GPUs too: the node's legacy pods count as usage."""


class ClaimPreparer:
    def __init__(
        self,
        settings: PreparerSettings,
        client: KubeClient,
        devices: Callable[[], Mapping[str, DeviceCapacity]],
        checkpoint_file: CheckpointFile,
        cdi: CdiSpecWriter,
        metrics: PluginMetrics,
        events: EventRecorder,
        mig: MigPartitions | None = None,
    ) -> None:
        self.settings = settings
        self.mig = mig or MigPartitions(None)
        """Claims of MIG partitions (`mig_prepare`); the default refuses them."""
        self.client = client
        self.devices = devices
        self.checkpoint_file = checkpoint_file
        self.cdi = cdi
        self.metrics = metrics
        self.events = events
        self.checkpoint = Checkpoint(checkpoint_file.boot_id)
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._in_flight: dict[str, tuple[str, tuple[DeviceGrant, ...]]] = {}
        """Claims between their over-commit check and PrepareCompleted: holder, grants.
        Their checkpoint record has no devices yet, so concurrent prepares see them here."""
        self._usage = UsageLedger()
        """What the records and `_in_flight` hold per device, for the over-commit check."""
        self._checkpoint_lock = asyncio.Lock()
        self._changes = 0
        self._written = 0
        self.refusal: StateRefusal | None = None
        """Set when the checkpoint must not be used: every claim is refused (`state_refusal`)."""

    async def start(self) -> None:
        """Load the checkpoint and undo whatever a crash or reboot left behind; a checkpoint
        that must not be used leaves everything as it is and every claim refused."""
        try:
            self.checkpoint = await asyncio.to_thread(self.checkpoint_file.load)
        except CheckpointError as error:
            self.refusal = StateRefusal.of(error, self.checkpoint_file.journal_path)
            log.error(
                "checkpoint refused: nothing is prepared, unprepared or cleaned up",
                extra={
                    "node": self.settings.node_name,
                    "reason": error.reason,
                    "error": str(error),
                },
            )
            return
        for uid, record in self.checkpoint.claims.items():
            self._usage.hold((uid, PREPARED), record_holdings(record))
        await asyncio.to_thread(self.cdi.sweep_temp_files)
        for uid, record in list(self.checkpoint.claims.items()):
            if record.state is PrepareState.STARTED:
                await self._clean_up_at_start(uid, "prepare interrupted")
        cache_root = self.settings.libvgpu.cache_root
        known = set(self.checkpoint.claims)
        for uid in await asyncio.to_thread(orphan_claims, known, self.cdi, cache_root):
            await self._clean_up_at_start(uid, "no checkpoint record")
        self.metrics.prepared_claims.set(len(self.checkpoint.claims))

    async def _clean_up_at_start(self, uid: str, why: str) -> None:
        """Roll a claim back at start; what cannot go yet (a cache dir a container still
        mounts, an instance NVML keeps) stays and is logged, never a reason to stop the
        plugin: a start that fails on it would fail again on every restart. A record left
        PrepareStarted is rolled back again by the claim's next prepare or unprepare."""
        try:
            await self._roll_back(uid)
        except DriverError as error:
            log.warning(
                "claim left in place at start: cleaned up on its next prepare or unprepare, "
                "or at a later start",
                extra={
                    "node": self.settings.node_name,
                    "claim_uid": uid,
                    "why": why,
                    "error": str(error),
                },
            )

    def prepared_records(self) -> list[ClaimRecord]:
        return list(self.checkpoint.claims.values())

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results = await asyncio.gather(
            *(self._timed("prepare", self._prepare_one, c) for c in claims)
        )
        return {claim.uid: result for claim, result in zip(claims, results, strict=True)}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        results = await asyncio.gather(
            *(self._timed("unprepare", self._unprepare_one, c) for c in claims)
        )
        return {claim.uid: result.error for claim, result in zip(claims, results, strict=True)}

    async def _timed(self, operation: str, run, claim: ClaimRef) -> PrepareResult:
        began = time.perf_counter()
        try:
            result = await run(claim)
        except DriverError as error:
            result = PrepareResult(error=str(error))
            self.metrics.errors.labels(operation, type(error).__name__).inc()
        seconds = time.perf_counter() - began
        self.metrics.latency.labels(operation).observe(seconds)
        self.metrics.operations.labels(operation, "error" if result.error else "ok").inc()
        context = {
            "claim": f"{claim.namespace}/{claim.name}",
            "uid": claim.uid,
            "node": self.settings.node_name,
            "duration_ms": round(seconds * 1000, 1),
        }
        if result.error:
            log.warning("%s failed", operation, extra={**context, "error": result.error})
        else:
            devices = ",".join(f"{d.pool_name}/{d.device_name}" for d in result.devices)
            pods = ",".join(result.pods)
            log.info("%s done", operation, extra={**context, "pods": pods, "devices": devices})
        return result

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._claim_locks.setdefault(uid, asyncio.Lock())

    def _refuse_if_refusing(self, ref: ClaimRef) -> None:
        if self.refusal is not None:
            raise self.refusal.claim_error(ref.namespace, ref.name, ref.uid)

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        ref = checked_ref(ref)
        self._refuse_if_refusing(ref)
        async with self._lock(ref.uid):
            record = self.checkpoint.claims.get(ref.uid)
            if (
                record is not None
                and record.state is PrepareState.COMPLETED
                and await asyncio.to_thread(self.cdi.spec_path(ref.uid).exists)
                and await self.mig.live(record.mig)
            ):
                return PrepareResult(record.devices, pods=record.pods)
            if record is not None and (record.state is PrepareState.STARTED or record.mig):
                await self._roll_back(ref.uid)
                record = None
            claim = await self._fetch_claim(ref)
            pods, uses = await self._check_containers(claim)
            partitions = await self.mig.plan(claim, self.settings.driver, self.settings.node_name)
            if partitions is not None:
                return await self._prepare_partitions(ref, pods, uses, partitions)
            devices = self.devices()
            plan = plan_claim(
                claim,
                driver=self.settings.driver,
                pool=self.settings.node_name,
                devices=devices,
                allow_claim_opt_out=self.settings.allow_claim_opt_out,
            )
            views = plan_views(plan, uses)
            node_pods = await self._node_pods() if self.settings.mixed_mode else None
            # From here to the STARTED record no await: the check and the claim's entry
            # in `_in_flight` are one step for every other prepare.
            others = self._usage.totals_except([(ref.uid, PREPARED), (ref.uid, IN_FLIGHT)])
            problem = overcommitted(others, plan, devices)
            if problem is None and node_pods is not None:
                problem = prepare_overcommit(
                    plan, self._prepared_shares(ref.uid), node_pods, devices
                )
            if problem is not None:
                raise InvalidParameterError("status.allocation", problem)
            nonce = record.cache_nonce if record is not None else uuidlib.uuid4().hex
            started = ClaimRecord(
                ref.uid, ref.namespace, ref.name, PrepareState.STARTED, cache_nonce=nonce, pods=pods
            )
            self._in_flight[ref.uid] = (f"claim {ref.namespace}/{ref.name}", plan.grants)
            self._usage.hold(
                (ref.uid, IN_FLIGHT),
                ((g.device, g.memory_limit_bytes, g.core_limit) for g in plan.grants),
            )
            try:
                await self._record(started)
                try:
                    prepared = await asyncio.to_thread(self._write_claim, plan, views, nonce)
                except BaseException:
                    await self._roll_back(ref.uid)
                    raise
                await self._record(replace(started, state=PrepareState.COMPLETED, devices=prepared))
            finally:
                self._in_flight.pop(ref.uid, None)
                self._usage.release((ref.uid, IN_FLIGHT))
            if plan.uncharged:
                self._event(
                    claim,
                    WARNING,
                    EVENT_REASON_UNCHARGED,
                    " ".join(u.message() for u in plan.uncharged),
                )
            if plan.ignored_opt_outs:
                self._event(claim, WARNING, EVENT_REASON_OPT_OUT_IGNORED, plan.opt_out_message())
            if plan.honoured_opt_outs:
                self._event(
                    claim, NORMAL, EVENT_REASON_ENFORCEMENT_DISABLED, plan.enforcement_off_message()
                )
            return PrepareResult(prepared, pods=pods)

    async def _prepare_partitions(
        self,
        ref: ClaimRef,
        pods: tuple[str, ...],
        uses: Sequence[ContainerUse],
        plan: PartitionPlan,
    ) -> PrepareResult:
        """Intents recorded before any create, each instance recorded once made, the CDI
        spec, PrepareCompleted last; any failure rolls back what the record names."""
        views = plan_views(plan.claim_plan(), uses)
        # No await from the check to the STARTED record: the placements are held by then.
        self.mig.refuse_conflicts(plan, self.checkpoint.claims.values())
        intents = tuple(grant.intent() for grant in plan.grants)
        state = PrepareState.STARTED
        record = ClaimRecord(ref.uid, ref.namespace, ref.name, state, pods=pods, mig=intents)
        try:
            await self._record(record)
            record = await self.mig.create_all(record, self._record)
            devices = await asyncio.to_thread(
                self.mig.write_spec, self.cdi, plan, views, record.mig
            )
        except BaseException:
            await self._roll_back(ref.uid)
            raise
        await self._record(replace(record, state=PrepareState.COMPLETED, devices=devices))
        return PrepareResult(devices, pods=pods)

    def _prepared_shares(self, uid: str) -> list[PreparedShare]:
        """Every other claim's devices prepared or being prepared here, by holder (for
        mixed mode's message; the plain check reads the ledger's totals)."""
        shares = [
            (
                f"claim {other.namespace}/{other.name}",
                d.device_name,
                d.memory_limit_bytes,
                d.core_limit,
            )
            for other in self.checkpoint.claims.values()
            if other.uid != uid
            for d in other.devices
        ]
        shares += [
            (holder, g.device, g.memory_limit_bytes, g.core_limit)
            for other, (holder, grants) in self._in_flight.items()
            if other != uid
            for g in grants
        ]
        return shares

    async def _node_pods(self) -> list[dict]:
        """The pods the node runs, for their HAMi allocations (mixed mode)."""
        try:
            return await fetch_node_pods(self.client, self.settings.node_name)
        except MixedReadError as error:
            raise DriverError(f"mixed mode: {error}; the share cannot be checked") from error

    async def _unprepare_one(self, ref: ClaimRef) -> PrepareResult:
        validate_claim_uid(ref.uid)
        self._refuse_if_refusing(ref)
        async with self._lock(ref.uid):
            record = self.checkpoint.claims.get(ref.uid)
            await self._roll_back(ref.uid)
        self._claim_locks.pop(ref.uid, None)
        if record is None:
            return PrepareResult()
        return PrepareResult(record.devices, pods=record.pods)

    async def _check_containers(
        self, claim: Mapping[str, Any]
    ) -> tuple[tuple[str, ...], tuple[ContainerUse, ...]]:
        """Refuse a claim that shares a container with another claim of this
        driver; returns the reserving pods (`namespace/name`) for the record and
        what each of their containers names of the claim."""
        metadata = claim.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "", metadata.get("name") or ""
        pods = []
        uses = []
        uses_driver: dict[str, bool] = {name: True}
        for reference in reserving_pods(claim):
            pod = await self._fetch_pod(namespace, reference.name, reference.uid)
            if pod is None:
                continue
            refuse_tampering(pod, f"{namespace}/{reference.name}", self.settings.libvgpu)
            pods.append(f"{namespace}/{reference.name}")
            uses += claim_uses(pod, f"{namespace}/{reference.name}", name)
            for container, claims in sorted(container_claims(pod).items()):
                if name not in claims or len(claims) == 1:
                    continue
                ours = []
                for other in sorted(claims):
                    if other not in uses_driver:
                        uses_driver[other] = await self._claim_uses_driver(namespace, other)
                    if uses_driver[other]:
                        ours.append(other)
                if len(ours) > 1:
                    raise InvalidParameterError(
                        f"pod {namespace}/{reference.name} container {container}",
                        f"uses {len(ours)} claims of driver {self.settings.driver} "
                        f"({', '.join(ours)}); libvgpu's per-GPU limits are numbered per "
                        "container, so limits from two claims would overwrite each other: "
                        "use one claim with several requests instead",
                    )
        return tuple(pods), tuple(uses)

    async def _fetch_pod(self, namespace: str, name: str, uid: str) -> dict | None:
        """The reserving pod, or None when it is gone or was replaced."""
        try:
            pod = await self.client.get(object_path(f"/api/v1/namespaces/{namespace}/pods", name))
        except NotFoundError:
            return None
        except ApiError as error:
            raise DriverError(f"cannot read pod {namespace}/{name}: {error}") from error
        return pod if (pod.get("metadata") or {}).get("uid") == uid else None

    async def _claim_uses_driver(self, namespace: str, name: str) -> bool:
        path = object_path(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", name)
        try:
            claim = await self.client.get(path)
        except NotFoundError:
            return False
        except ApiError as error:
            raise DriverError(f"cannot read claim {namespace}/{name}: {error}") from error
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        return any(result.get("driver") == self.settings.driver for result in results)

    def _event(self, claim: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """An Event on the claim, where `kubectl describe` shows it (and the log, a Warning
        at WARNING, a Normal at INFO); written in the background, so prepare never waits
        on it."""
        metadata = claim.get("metadata") or {}
        log.log(
            logging.WARNING if event_type == WARNING else logging.INFO,
            "%s",
            message,
            extra={
                "claim": f"{metadata.get('namespace')}/{metadata.get('name')}",
                "reason": reason,
            },
        )
        reference = involved_object(claim, "ResourceClaim", "resource.k8s.io/v1")
        self.events.emit(reference, event_type, reason, message)

    async def _fetch_claim(self, ref: ClaimRef) -> dict:
        path = object_path(
            f"/apis/resource.k8s.io/v1/namespaces/{ref.namespace}/resourceclaims", ref.name
        )
        who = f"{ref.namespace}/{ref.name} ({ref.uid})"
        timeout_s = self.settings.claim_read_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                claim = await self.client.get(path)
        except NotFoundError:
            raise InvalidParameterError("claim", f"claim {who} does not exist") from None
        except ApiError as error:
            raise DriverError(f"cannot read claim {who}: {error}") from error
        except TimeoutError:
            raise DriverError(
                f"cannot read claim {who}: the API server did not answer within {timeout_s:g} s"
            ) from None
        if (claim.get("metadata") or {}).get("uid") != ref.uid:
            raise InvalidParameterError(
                "claim.uid",
                f"claim {ref.namespace}/{ref.name} now has uid "
                f"{(claim.get('metadata') or {}).get('uid')}, not {ref.uid}; it was replaced",
            )
        return claim

    def _write_claim(
        self, plan: ClaimPlan, views: tuple[ClaimView, ...], nonce: str
    ) -> tuple[PreparedDevice, ...]:
        """The side effects: cache dir, then CDI spec (in a worker thread); first
        the host files the spec will name, so it applies when the runtime reads it."""
        vendor = plan_vendor(plan)
        host_nodes = None
        amd = vendor is AMD
        if vendor is not NVIDIA:
            edits = build_vendor_claim_edits(plan, views, vendor)
            if amd and self.settings.with_device_nodes:
                host_nodes = host_amd_device_nodes(
                    self.settings.dev_dir, (g.gpu for g in plan.grants)
                )
        else:
            paths = self.settings.libvgpu
            check_libvgpu_files(paths, with_preload=not plan.disable_control)
            host_nodes = (
                host_device_nodes(self.settings.dev_dir, (g.gpu.minor for g in plan.grants))
                if self.settings.with_device_nodes
                else None
            )
            cache = claim_cache_location(paths, plan.uid, nonce)
            create_cache_dir(cache, paths, self.settings.cache_dirs)
            edits = build_claim_edits(plan, views, cache, paths)
        spec = build_claim_spec(
            plan.uid,
            [
                ClaimDeviceEdits(
                    g.device,
                    g.gpu.minor,
                    own,
                    g.share_id or None,
                    amd_device_nodes(g.gpu) if amd else None,
                )
                for g, own in zip(plan.grants, edits.per_grant, strict=True)
            ],
            common=edits.common,
            host_nodes=host_nodes,
            control_nodes=AMD_CONTROL_DEVICE_NODES if amd else NVIDIA_CONTROL_DEVICE_NODES,
        )
        self.cdi.write_claim_spec(spec)
        prefix = self.settings.nvidia_cdi_prefix if vendor is NVIDIA else ""
        return tuple(
            PreparedDevice(
                request_names=(base_request(grant.request),) if grant.request else (),
                pool_name=grant.pool,
                device_name=grant.device,
                cdi_device_ids=(cdi_device.qualified_id,)
                + ((f"{prefix}={grant.gpu.uuid}",) if prefix else ()),
                share_id=grant.share_id,
                uuid=grant.gpu.uuid,
                memory_limit_bytes=grant.memory_limit_bytes,
                core_limit=grant.core_limit,
            )
            for grant, cdi_device in zip(plan.grants, spec.devices, strict=True)
        )

    async def _roll_back(self, uid: str) -> None:
        """Remove everything a claim may own here; missing pieces are fine."""
        record = self.checkpoint.claims.get(uid)
        if record is not None and record.mig:
            others = (m for r in self.checkpoint.claims.values() if r.uid != uid for m in r.mig)
            await self.mig.destroy(f"{record.namespace}/{record.name} ({uid})", record.mig, others)
        await asyncio.to_thread(self.cdi.remove_claim_spec, uid)
        host_dir = str(Path(self.settings.libvgpu.cache_root) / CLAIMS_DIR / uid)
        try:
            await asyncio.to_thread(
                remove_cache_dir, host_dir, self.settings.libvgpu, self.settings.cache_dirs
            )
        except CacheDirError as error:
            raise DriverError(f"claim {uid}: cache dir not removed: {error}") from error
        if uid in self.checkpoint.claims:
            self.checkpoint.claims.pop(uid, None)
            self._usage.release((uid, PREPARED))
            await self._persist()

    async def _record(self, record: ClaimRecord) -> None:
        self.checkpoint.claims[record.uid] = record
        self._usage.hold((record.uid, PREPARED), record_holdings(record))
        await self._persist()

    async def _persist(self) -> None:
        """Make the in-memory checkpoint durable, with group commit: callers
        that changed it while a write was running share the next write."""
        self._changes += 1
        wanted = self._changes
        async with self._checkpoint_lock:
            if self._written >= wanted:
                return
            written = self._changes
            snapshot = replace(self.checkpoint, claims=dict(self.checkpoint.claims))
            await asyncio.to_thread(self.checkpoint_file.store, snapshot)
            self._written = written
        self.metrics.prepared_claims.set(
            sum(r.state is PrepareState.COMPLETED for r in snapshot.claims.values())
        )
