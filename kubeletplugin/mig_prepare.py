"""Prepare's side effects for a claim of MIG partitions: create, find and destroy the
instances, and write the claim's CDI spec.

The preparer drives the order that makes it crash-safe (`preparer`): the claim's
PrepareStarted record carries an intent per partition (card, profile, placement)
before anything is created; each instance, once made, is recorded (GPU and compute
instance ids, MIG uuid) before the next step; PrepareCompleted comes last. Roll back,
on an error or at start for a record a crash left in PrepareStarted, destroys what
the record names: a created instance by its ids (and only while the card still
shows that id with the record's profile and placement, so an id reused since is
never hit), an intent by its profile at its placement (the create may have run
before the crash). A GPU instance no record names (an administrator's static
layout) is never touched, and a placement overlapping it is refused. The one window
left: an administrator creating an instance at exactly an intent's placement
between prepare's check and its create, with the plugin killed right after, would
have that instance taken for the intent's.

After a reboot the instances are gone and so is the checkpoint (another boot id):
kubelet's repeated prepare of each claim creates them again at the allocated
placements. A completed claim whose instance is gone (a mock plugin restarted, an
administrator destroyed it) is rolled back and prepared again on kubelet's next call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from cdi.mig import MigDevice, mig_device_nodes, partition_device_edits
from cdi.spec import build_claim_spec
from cdi.writer import CdiSpecWriter
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.objects.mig_profiles import Placement
from kubeletplugin.checkpoint import ClaimRecord, MigRecord, PreparedDevice
from kubeletplugin.claim_layout import ClaimView
from kubeletplugin.gpus import GpuBackend, GpuInfo, MigInstanceManager
from kubeletplugin.host_files import HostSetupError, host_device_nodes
from kubeletplugin.mig_caps import NVIDIA_CAPABILITIES, mig_cap_minors
from kubeletplugin.mig_plan import (
    PartitionPlan,
    owns,
    partition_conflict,
    partition_results,
    plan_partitions,
)
from kubeletplugin.mig_state import MigError, MigNotFoundError, MigState
from kubeletplugin.prepare_plan import base_request


class MigPartitions:
    """Partitions for the preparer; `backend` None (or one that cannot create MIG
    instances) refuses every partition with a message saying so."""

    def __init__(
        self,
        backend: GpuBackend | None,
        *,
        with_device_nodes: bool = False,
        dev_dir: Path = Path("/dev"),
        caps_root: Path = NVIDIA_CAPABILITIES,
    ) -> None:
        self.backend = backend
        self.with_device_nodes = with_device_nodes
        self.dev_dir = dev_dir
        self.caps_root = caps_root

    async def plan(self, claim: Mapping[str, Any], driver: str, pool: str) -> PartitionPlan | None:
        """The claim's partitions read against the cards now; None when it has none."""
        if not any(name is not None for _, _, name in partition_results(claim, driver, pool)):
            return None
        self._manager()
        gpus = await self._discover()
        return plan_partitions(claim, driver=driver, pool=pool, gpus=gpus)

    @staticmethod
    def refuse_conflicts(plan: PartitionPlan, records: Iterable[ClaimRecord]) -> None:
        """Synchronous on purpose: the caller records the intents right after, with no
        await between, so two claims can never both pass for overlapping placements."""
        problem = partition_conflict(plan, records)
        if problem is not None:
            raise InvalidParameterError("status.allocation.devices.results", problem)

    async def create(self, intent: MigRecord) -> MigRecord:
        """The instance of an intent; a refusal leaves nothing behind (the backends'
        contract) and is raised as an InvalidParameterError naming card and placement."""
        manager = self._manager()
        try:
            made = await asyncio.to_thread(
                manager.create_mig_instance, intent.gpu_uuid, intent.profile, intent.start
            )
        except MigError as error:
            raise InvalidParameterError("status.allocation.devices.results", str(error)) from None
        return MigRecord(
            intent.gpu_uuid,
            intent.profile,
            intent.start,
            intent.size,
            made.gpu_instance_id,
            made.compute_instance_id,
            made.uuid,
        )

    async def create_all(
        self, record: ClaimRecord, save: Callable[[ClaimRecord], Awaitable[None]]
    ) -> ClaimRecord:
        """Create the record's intents in turn, saving the record after each instance; a
        refused create (nothing made) is dropped from the record with the intents after
        it, and saved, before the error goes up, so roll back leaves their places alone."""
        for position, intent in enumerate(record.mig):
            try:
                made = await self.create(intent)
            except DriverError:
                await save(replace(record, mig=record.mig[:position]))
                raise
            record = replace(
                record, mig=(*record.mig[:position], made, *record.mig[position + 1 :])
            )
            await save(record)
        return record

    async def live(self, mine: Sequence[MigRecord]) -> bool:
        """Whether every instance of a completed claim is still on its card."""
        if not mine:
            return True
        states = {gpu.uuid: gpu.mig for gpu in await self._discover()}
        return all(
            m.created and _instance(states.get(m.gpu_uuid, MigState()), m) is not None for m in mine
        )

    async def destroy(
        self, who: str, mine: Sequence[MigRecord], others: Iterable[MigRecord]
    ) -> None:
        """Destroy what the records name and the cards still show; gone is fine."""
        if not mine:
            return
        manager = self._manager()
        states = {gpu.uuid: gpu.mig for gpu in await self._discover()}
        claimed = [m for m in others if m.created]
        for record in mine:
            target = _target(states.get(record.gpu_uuid, MigState()), record, claimed)
            if target is None:
                continue
            try:
                await asyncio.to_thread(manager.destroy_mig_instance, record.gpu_uuid, *target)
            except MigNotFoundError:
                continue
            except MigError as error:
                raise DriverError(f"claim {who}: MIG instance not destroyed: {error}") from error

    def write_spec(
        self,
        cdi: CdiSpecWriter,
        plan: PartitionPlan,
        views: Sequence[ClaimView],
        made: Sequence[MigRecord],
    ) -> tuple[PreparedDevice, ...]:
        """The claim's CDI spec (in a worker thread): each partition's MIG device."""
        devices = [
            MigDevice(
                grant.device,
                grant.gpu.minor,
                record.mig_uuid,
                self._cap_minors(grant.gpu, record),
                grant.share_id or None,
            )
            for grant, record in zip(plan.grants, made, strict=True)
        ]
        visible = {
            position: tuple(made[i].mig_uuid for i in view.grants)
            for view in views
            for position in view.grants
        }
        spec = build_claim_spec(
            plan.uid,
            [partition_device_edits(d, visible[i]) for i, d in enumerate(devices)],
            host_nodes=self._host_nodes(devices) if self.with_device_nodes else None,
        )
        cdi.write_claim_spec(spec)
        return tuple(
            PreparedDevice(
                request_names=(base_request(grant.request),) if grant.request else (),
                pool_name=grant.pool,
                device_name=grant.device,
                cdi_device_ids=(cdi_device.qualified_id,),
                share_id=grant.share_id,
                uuid=grant.gpu.uuid,
            )
            for grant, cdi_device in zip(plan.grants, spec.devices, strict=True)
        )

    def _cap_minors(self, gpu: GpuInfo, record: MigRecord) -> tuple[int, ...]:
        if not self.with_device_nodes:
            return ()
        assert record.gpu_instance_id is not None and record.compute_instance_id is not None
        return mig_cap_minors(
            gpu.minor, record.gpu_instance_id, record.compute_instance_id, self.caps_root
        )

    def _host_nodes(self, devices: Sequence[MigDevice]) -> dict[str, str]:
        """The parents' and control nodes (`host_device_nodes`), and each capability
        node, which must exist: without it the container cannot open its instance."""
        nodes = host_device_nodes(self.dev_dir, (d.parent_minor for d in devices))
        for device in devices:
            for path in mig_device_nodes(device)[1:]:
                host = self.dev_dir / Path(path).relative_to("/dev")
                if not host.exists():
                    raise HostSetupError(
                        f"MIG capability node {host} of {device.device} ({device.mig_uuid}) "
                        "is missing on this node; create it (nvidia-modprobe -f "
                        f"{self.caps_root}/.../access) or let the NVIDIA toolkit do so"
                    )
                nodes[path] = str(host)
        return nodes

    def _manager(self) -> MigInstanceManager:
        if not isinstance(self.backend, MigInstanceManager):
            raise DriverError(
                "this node's GPU backend cannot create MIG instances; the claim's "
                "partitions are not prepared"
            )
        return self.backend

    async def _discover(self) -> Sequence[GpuInfo]:
        assert self.backend is not None
        return await asyncio.to_thread(self.backend.discover)


def _instance(state: MigState, record: MigRecord) -> tuple[int, int | None] | None:
    """The created record's GPU instance (and compute instance, when present) if the card
    still shows it with the record's profile, placement and MIG uuid."""
    placement = Placement(record.start, record.size)
    for instance in state.instances:
        if (
            instance.gpu_instance_id == record.gpu_instance_id
            and instance.compute_instance_id == record.compute_instance_id
            and instance.profile == record.profile
            and instance.placement == placement
            and (not record.mig_uuid or not instance.uuid or instance.uuid == record.mig_uuid)
        ):
            return instance.gpu_instance_id, instance.compute_instance_id
    return None


def _target(
    state: MigState, record: MigRecord, claimed: Sequence[MigRecord]
) -> tuple[int, int | None] | None:
    """What to destroy for a record: its instance, or the GPU instance at its place that
    no other record holds (an intent's, or one whose compute instance is gone)."""
    if record.created:
        found = _instance(state, record)
        place = (record.gpu_instance_id, record.profile, Placement(record.start, record.size))
        if found is None and place in state.empty_gpu_instances:
            return record.gpu_instance_id, None
        return found
    for gpu_instance, profile, placement in state.gpu_instances():
        if not owns(record, gpu_instance, profile, placement):
            continue
        if any(
            m.gpu_uuid == record.gpu_uuid and owns(m, gpu_instance, profile, placement)
            for m in claimed
        ):
            continue
        compute = next(
            (i.compute_instance_id for i in state.instances if i.gpu_instance_id == gpu_instance),
            None,
        )
        return gpu_instance, compute
    return None
