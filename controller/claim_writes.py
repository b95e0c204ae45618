"""Writing a claim's allocation, adding a pod to it, taking it back: conditional API writes.

Allocating is one status write: `status.allocation` and, for a pod, the pod in
`status.reservedFor`, so kube-scheduler's PreBind finds the claim reserved and
only binds (reference kubernetes-dra.md §2, "Checked later"). No
`resource.kubernetes.io/delete-protection` finalizer: a status write cannot set
it, so kube-controller-manager only drops reservations of gone pods and the
controller clears what is left (sweeper.py). A further pod of a shared claim
is appended to `reservedFor` the same way. Every write carries the
resourceVersion that was read: a 409 means someone changed the claim, so it is
read again and written again if that still makes sense; 429/5xx/timeouts back
off (doubling, jittered). Taking an allocation back clears `allocation`,
`reservedFor` and `devices` together, unless a pod other than the one being
moved reserved the claim meanwhile. Removing the controller's allocation gate
from a pod is one JSON patch whose `test` pins the entry it removes
(allocation_gate.py).

Under leader election every write first passes the leader's fence
(dra_driver/kube/leader.py `check`), right before it is sent: a decision made
before the process was paused past its lease is dropped, not written.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from controller.allocation_gate import Patch
from controller.object_state import allocated_node, allocation_of, reservations_of
from controller.requests import claim_name
from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.leader import NO_FENCE, WriteFence
from dra_driver.kube.rest import (
    JSON_PATCH,
    ApiError,
    ConflictError,
    KubeClient,
    NotFoundError,
    object_path,
)
from dra_driver.objects.resource_api import RESOURCE_API

MAX_RESERVATIONS = 256
"""kube's limit on `status.reservedFor` entries (ResourceClaimReservedForMaxSize)."""

TEST_FAILED = "test failed"
"""json-patch's error when a `test` operation does not match (the API answers 422)."""

Reservation = Mapping[str, Any]
"""A `reservedFor` entry: {resource: pods, name, uid}."""


def claim_path(namespace: str, name: str) -> str:
    return object_path(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims", name)


def pod_reservation(pod: Mapping[str, Any]) -> dict[str, str]:
    """The `reservedFor` entry naming the pod, as kube-scheduler writes it."""
    metadata = pod["metadata"]
    return {"resource": "pods", "name": str(metadata["name"]), "uid": str(metadata.get("uid"))}


def reserved_for(claim: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in reservations_of(claim))


class ClaimTakenError(DriverError):
    """The claim was allocated by someone else, or deleted, while we were writing."""


@dataclass(frozen=True, slots=True)
class WriteSettings:
    attempts: int = 5
    """Tries per claim before giving up (the caller then undoes and retries later)."""

    initial_delay_s: float = 0.05
    """First pause after a 429/5xx/timeout; doubles per attempt."""

    max_delay_s: float = 2.0


class ClaimWriter:
    def __init__(
        self, client: KubeClient, settings: WriteSettings, fence: WriteFence = NO_FENCE
    ) -> None:
        self.client = client
        self.settings = settings
        self.fence = fence

    async def allocate(
        self,
        claim: dict[str, Any],
        allocation: dict[str, Any],
        reservation: Reservation | None,
    ) -> dict[str, Any]:
        """The stored claim with `allocation` (and `reservation` as its only `reservedFor`
        entry, None for a standalone claim); raises ClaimTakenError or the last API error."""
        path = claim_path(claim["metadata"]["namespace"], claim["metadata"]["name"])
        current = claim
        last_error: DriverError = TransientError("no attempt made")
        for attempt in range(self.settings.attempts):
            if allocation_of(current) is not None:
                raise ClaimTakenError(f"claim {claim_name(current)} was allocated meanwhile")
            status = {**(current.get("status") or {}), "allocation": allocation}
            if reservation is not None:
                status["reservedFor"] = [dict(reservation)]
            try:
                return await self._write_status(path, {**current, "status": status})
            except ConflictError as error:
                last_error = error
            except TransientError as error:
                last_error = error
                await self._pause(attempt)
            current = await self._reread(path, current)
        raise last_error

    async def reserve(
        self, claim: dict[str, Any], reservation: Reservation
    ) -> dict[str, Any] | None:
        """Append the pod to the allocated claim's `reservedFor`, as kube-scheduler's PreBind
        would; the stored claim listing it (also when kube-scheduler listed it meanwhile),
        or None when that cannot be (no longer allocated, or now on another node than
        the pod was checked against, full, deleted)."""
        path = claim_path(claim["metadata"]["namespace"], claim["metadata"]["name"])
        uid = str(reservation.get("uid"))
        current = claim
        for attempt in range(self.settings.attempts):
            if reserved_for(current, uid):
                return current
            reserved = reservations_of(current)
            if (
                allocation_of(current) is None
                or allocated_node(current) != allocated_node(claim)
                or len(reserved) >= MAX_RESERVATIONS
            ):
                return None
            status = {**(current.get("status") or {}), "reservedFor": [*reserved, reservation]}
            try:
                return await self._write_status(path, {**current, "status": status})
            except NotFoundError:
                return None
            except ConflictError:
                pass
            except TransientError:
                await self._pause(attempt)
            try:
                current = await self._reread(path, current)
            except ClaimTakenError:
                return None
        raise TransientError(f"could not reserve {claim_name(claim)} for pod {uid}")

    async def deallocate(self, claim: dict[str, Any], pod_uid: str = "") -> dict[str, Any] | None:
        """Clear the allocation, its reservation and device status; None if there was
        nothing to take back (already clear, reserved by a pod other than `pod_uid`
        meanwhile, or the claim is gone)."""
        try:
            return await self._deallocate(claim, pod_uid)
        except ClaimTakenError:
            return None

    async def _deallocate(self, claim: dict[str, Any], pod_uid: str) -> dict[str, Any] | None:
        path = claim_path(claim["metadata"]["namespace"], claim["metadata"]["name"])
        current = claim
        for attempt in range(self.settings.attempts):
            others = [r for r in reservations_of(current) if r.get("uid") != pod_uid]
            if allocation_of(current) is None or others:
                return None
            status = {
                k: v
                for k, v in (current.get("status") or {}).items()
                if k not in ("allocation", "reservedFor", "devices")
            }
            try:
                return await self._write_status(path, {**current, "status": status})
            except NotFoundError:
                return None
            except ConflictError:
                current = await self._reread(path, current)
            except TransientError:
                await self._pause(attempt)
                current = await self._reread(path, current)
        raise TransientError(f"could not clear the allocation of {claim_name(claim)}")

    async def remove_gate(self, pod: Mapping[str, Any], patch: Patch) -> bool:
        """Send the patch that removes the controller's gate from the pod; False when the
        pod is gone or its gates changed since it was read (the patch's `test` failed:
        422 with json-patch's "test failed"), so the pod's next event decides again.
        Other refusals (an admission policy's 422 Invalid among them) are raised."""
        metadata = pod["metadata"]
        path = object_path(f"/api/v1/namespaces/{metadata['namespace']}/pods", metadata["name"])
        self.fence.check()
        try:
            await self.client.patch(path, patch, JSON_PATCH)
        except NotFoundError:
            return False
        except ApiError as error:
            if error.status == HTTPStatus.UNPROCESSABLE_ENTITY and TEST_FAILED in error.message:
                return False
            raise
        return True

    async def _write_status(self, path: str, claim: dict[str, Any]) -> dict[str, Any]:
        """Replace the claim's status, if this replica may still write."""
        self.fence.check()
        return await self.client.replace(f"{path}/status", claim)

    async def _reread(self, path: str, current: dict[str, Any]) -> dict[str, Any]:
        """The claim as stored now; the last known version if the read fails transiently."""
        try:
            return await self.client.get(path)
        except NotFoundError as error:
            raise ClaimTakenError(f"claim {path} was deleted") from error
        except TransientError:
            return current

    async def _pause(self, attempt: int) -> None:
        delay = min(self.settings.initial_delay_s * 2**attempt, self.settings.max_delay_s)
        await asyncio.sleep(delay * random.uniform(1.0, 1.2))
