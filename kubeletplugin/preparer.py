"""NodePrepareResources / NodeUnprepareResources, claim by claim.

Idempotent and crash-safe: under the claim's lock, a completed claim returns
what was recorded (rewriting its CDI spec if a reboot wiped it); otherwise
PrepareStarted is checkpointed before any side effect, the cache dir and CDI
spec are written, and PrepareCompleted is checkpointed last. A claim left in
PrepareStarted by a crash is rolled back and redone. Different claims run
concurrently; every checkpoint update goes through one lock so none is lost.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from cdi.naming import validate_claim_uid
from cdi.spec import ClaimDeviceEdits, build_claim_spec
from cdi.writer import CdiSpecWriter
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient, NotFoundError, object_path
from dra_driver.names import is_dns_label, is_dns_subdomain
from kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointFile,
    ClaimRecord,
    PreparedDevice,
    PrepareState,
)
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.prepare_plan import (
    ClaimPlan,
    DeviceCapacity,
    overcommitted,
    plan_claim,
)
from libvgpu.cache_dirs import CacheDirError, CacheDirSettings, create_cache_dir, remove_cache_dir
from libvgpu.cache_paths import CLAIMS_DIR, claim_cache_location
from libvgpu.container_edits import (
    ContainerEdits,
    DeviceShare,
    ShareSet,
    build_container_edits,
    order_devices,
)
from libvgpu.settings import LibvgpuPaths

log = logging.getLogger(__name__)

PER_ORDINAL_ENV = re.compile(r"CUDA_DEVICE_(MEMORY|SM)_LIMIT_(\d+)")


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What kubelet says about a claim: namespace, name and uid, nothing else."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class PreparerSettings:
    driver: str
    node_name: str
    libvgpu: LibvgpuPaths = field(default_factory=LibvgpuPaths)
    cache_dirs: CacheDirSettings = field(default_factory=CacheDirSettings)
    with_device_nodes: bool = True
    """False when the NVIDIA CDI device supplies the device nodes."""
    nvidia_cdi_prefix: str | None = None
    """e.g. `nvidia.com/gpu`: also return `<prefix>=<uuid>` for each device."""


def checked_ref(ref: ClaimRef) -> ClaimRef:
    """Refuse anything that could escape a path or a URL before it is used."""
    validate_claim_uid(ref.uid)
    if not is_dns_label(ref.namespace):
        raise InvalidParameterError("claim.namespace", f"{ref.namespace!r} is not a DNS label")
    if not is_dns_subdomain(ref.name):
        raise InvalidParameterError("claim.name", f"{ref.name!r} is not a DNS subdomain")
    return ref


class ClaimPreparer:
    def __init__(
        self,
        settings: PreparerSettings,
        client: KubeClient,
        devices: Callable[[], Mapping[str, DeviceCapacity]],
        checkpoint_file: CheckpointFile,
        cdi: CdiSpecWriter,
        metrics: PluginMetrics,
    ) -> None:
        self.settings = settings
        self.client = client
        self.devices = devices
        self.checkpoint_file = checkpoint_file
        self.cdi = cdi
        self.metrics = metrics
        self.checkpoint = Checkpoint(checkpoint_file.boot_id)
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._checkpoint_lock = asyncio.Lock()
        self._changes = 0
        self._written = 0

    async def start(self) -> None:
        """Load the checkpoint and undo whatever a crash or reboot left behind."""
        self.checkpoint = await asyncio.to_thread(self.checkpoint_file.load)
        await asyncio.to_thread(self.cdi.sweep_temp_files)
        for uid, record in list(self.checkpoint.claims.items()):
            if record.state is PrepareState.STARTED:
                await self._roll_back(uid)
        known = set(self.checkpoint.claims)
        for uid in await asyncio.to_thread(self.cdi.list_claim_specs):
            if uid not in known:
                await self._roll_back(uid)
        for uid in await asyncio.to_thread(self._cache_dir_uids):
            if uid not in known:
                await self._roll_back(uid)
        self.metrics.prepared_claims.set(len(self.checkpoint.claims))

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
        self.metrics.latency.labels(operation).observe(time.perf_counter() - began)
        self.metrics.operations.labels(operation, "error" if result.error else "ok").inc()
        if result.error:
            log.warning(
                "%s failed",
                operation,
                extra={"claim": claim.uid, "node": self.settings.node_name, "error": result.error},
            )
        return result

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._claim_locks.setdefault(uid, asyncio.Lock())

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        ref = checked_ref(ref)
        async with self._lock(ref.uid):
            record = self.checkpoint.claims.get(ref.uid)
            if record is not None and record.state is PrepareState.COMPLETED:
                if await asyncio.to_thread(self.cdi.spec_path(ref.uid).exists):
                    return PrepareResult(record.devices)
            elif record is not None:
                await self._roll_back(ref.uid)
                record = None
            claim = await self._fetch_claim(ref)
            devices = self.devices()
            plan = plan_claim(
                claim, driver=self.settings.driver, pool=self.settings.node_name, devices=devices
            )
            others = [
                (device.device_name, device.memory_limit_bytes, device.core_limit)
                for other in self.checkpoint.claims.values()
                if other.uid != ref.uid
                for device in other.devices
            ]
            problem = overcommitted(others, plan, devices)
            if problem is not None:
                raise InvalidParameterError("status.allocation", problem)
            nonce = record.cache_nonce if record is not None else uuidlib.uuid4().hex
            started = ClaimRecord(
                ref.uid, ref.namespace, ref.name, PrepareState.STARTED, cache_nonce=nonce
            )
            await self._record(started)
            try:
                prepared = await asyncio.to_thread(self._write_claim, plan, nonce)
            except BaseException:
                await self._roll_back(ref.uid)
                raise
            await self._record(replace(started, state=PrepareState.COMPLETED, devices=prepared))
            return PrepareResult(prepared)

    async def _unprepare_one(self, ref: ClaimRef) -> PrepareResult:
        validate_claim_uid(ref.uid)
        async with self._lock(ref.uid):
            await self._roll_back(ref.uid)
        self._claim_locks.pop(ref.uid, None)
        return PrepareResult()

    async def _fetch_claim(self, ref: ClaimRef) -> dict:
        path = object_path(
            f"/apis/resource.k8s.io/v1/namespaces/{ref.namespace}/resourceclaims", ref.name
        )
        who = f"{ref.namespace}/{ref.name} ({ref.uid})"
        try:
            claim = await self.client.get(path)
        except NotFoundError:
            raise InvalidParameterError("claim", f"claim {who} does not exist") from None
        except ApiError as error:
            raise DriverError(f"cannot read claim {who}: {error}") from error
        if (claim.get("metadata") or {}).get("uid") != ref.uid:
            raise InvalidParameterError(
                "claim.uid",
                f"claim {ref.namespace}/{ref.name} now has uid "
                f"{(claim.get('metadata') or {}).get('uid')}, not {ref.uid}; it was replaced",
            )
        return claim

    def _write_claim(self, plan: ClaimPlan, nonce: str) -> tuple[PreparedDevice, ...]:
        """The side effects: cache dir, then CDI spec (in a worker thread)."""
        paths = self.settings.libvgpu
        cache = claim_cache_location(paths, plan.uid, nonce)
        create_cache_dir(cache, paths, self.settings.cache_dirs)
        common, per_device = split_edits(plan, cache, paths)
        spec = build_claim_spec(
            plan.uid,
            [
                ClaimDeviceEdits(g.device, g.gpu.minor, per_device[g.gpu.uuid], g.share_id or None)
                for g in plan.grants
            ],
            common=common,
            with_device_nodes=self.settings.with_device_nodes,
        )
        self.cdi.write_claim_spec(spec)
        prefix = self.settings.nvidia_cdi_prefix
        return tuple(
            PreparedDevice(
                request_names=(grant.request,) if grant.request else (),
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
            await self._persist()

    async def _record(self, record: ClaimRecord) -> None:
        self.checkpoint.claims[record.uid] = record
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
            snapshot = Checkpoint(self.checkpoint.boot_id, dict(self.checkpoint.claims))
            await asyncio.to_thread(self.checkpoint_file.store, snapshot)
            self._written = written
        self.metrics.prepared_claims.set(
            sum(r.state is PrepareState.COMPLETED for r in snapshot.claims.values())
        )

    def _cache_dir_uids(self) -> list[str]:
        root = Path(self.settings.libvgpu.cache_root) / CLAIMS_DIR
        if not root.is_dir():
            return []
        uids = []
        for entry in root.iterdir():
            try:
                uids.append(validate_claim_uid(entry.name))
            except InvalidParameterError:
                continue
        return uids


def split_edits(
    plan: ClaimPlan, cache, paths: LibvgpuPaths
) -> tuple[ContainerEdits, dict[str, ContainerEdits]]:
    """libvgpu's edits for the whole claim, split into what every container of
    the claim shares and each GPU's own per-ordinal limits (so a CDI device
    carries only env keys no other device of the claim sets).

    The shared part lists every GPU of the claim: a container that uses only
    one request of a multi-request claim still sees all of the claim's GPUs.
    """
    merged: dict[str, DeviceShare] = {}
    for grant in plan.grants:
        previous = merged.get(grant.gpu.uuid)
        memory = grant.memory_limit_bytes + (previous.memory_limit_bytes or 0 if previous else 0)
        cores = grant.core_limit + (previous.core_limit_percent or 0 if previous else 0)
        merged[grant.gpu.uuid] = DeviceShare(
            grant.gpu.uuid, grant.gpu.index, memory, min(cores, 100) or None
        )
    shares = ShareSet(
        devices=tuple(merged.values()),
        cache=cache,
        policy=plan.policy,
        priority=plan.priority,
        disable_control=plan.disable_control,
    )
    edits = build_container_edits(shares, paths)
    ordered = order_devices(shares.devices)
    per_device: dict[str, list] = {share.uuid: [] for share in ordered}
    common_env = []
    for variable in edits.env:
        match = PER_ORDINAL_ENV.fullmatch(variable.name)
        if match:
            per_device[ordered[int(match.group(2))].uuid].append(variable)
        else:
            common_env.append(variable)
    return (
        ContainerEdits(env=tuple(common_env), mounts=edits.mounts),
        {uuid: ContainerEdits(env=tuple(env), mounts=()) for uuid, env in per_device.items()},
    )
