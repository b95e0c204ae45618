"""Writing a claim's allocation and taking it back: conditional API writes with retries.

Allocating is two writes, as kube-scheduler does: the
`resource.kubernetes.io/delete-protection` finalizer on the claim (so
kube-controller-manager deallocates it once its last pod is gone), then
`status.allocation` through the status subresource. Both carry the
resourceVersion that was read: a 409 means someone changed the claim, so it is
read again and, if still unallocated, written again; 429/5xx/timeouts back off
(doubling, jittered). Taking an allocation back clears `status.allocation`
unless a pod reserved the claim meanwhile, then drops the finalizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.object_state import allocation_of, reservations_of
from controller.requests import claim_name
from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.rest import ConflictError, KubeClient, NotFoundError, object_path
from dra_driver.objects.resource_api import DELETE_PROTECTION, RESOURCE_API


def claim_path(namespace: str, name: str) -> str:
    return object_path(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims", name)


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
    def __init__(self, client: KubeClient, settings: WriteSettings) -> None:
        self.client = client
        self.settings = settings

    async def allocate(self, claim: dict[str, Any], allocation: dict[str, Any]) -> dict[str, Any]:
        """The stored claim with `allocation`; raises ClaimTakenError or the last API error."""
        path = claim_path(claim["metadata"]["namespace"], claim["metadata"]["name"])
        current = claim
        last_error: DriverError = TransientError("no attempt made")
        for attempt in range(self.settings.attempts):
            if allocation_of(current) is not None:
                raise ClaimTakenError(f"claim {claim_name(current)} was allocated meanwhile")
            try:
                finalizers = list(current["metadata"].get("finalizers") or [])
                if DELETE_PROTECTION not in finalizers:
                    current = await self._set_finalizers(
                        path, current, [*finalizers, DELETE_PROTECTION]
                    )
                status = {**(current.get("status") or {}), "allocation": allocation}
                return await self.client.replace(f"{path}/status", {**current, "status": status})
            except ConflictError as error:
                last_error = error
            except TransientError as error:
                last_error = error
                await self._pause(attempt)
            current = await self._reread(path, current)
        raise last_error

    async def deallocate(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        """Clear the allocation and our finalizer; None if there was nothing to take back
        (already clear, reserved by a pod meanwhile, or the claim is gone)."""
        try:
            return await self._deallocate(claim)
        except ClaimTakenError:
            return None

    async def _deallocate(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        path = claim_path(claim["metadata"]["namespace"], claim["metadata"]["name"])
        current = claim
        for attempt in range(self.settings.attempts):
            if allocation_of(current) is None or reservations_of(current):
                return None
            status = {k: v for k, v in (current.get("status") or {}).items() if k != "allocation"}
            try:
                current = await self.client.replace(f"{path}/status", {**current, "status": status})
            except NotFoundError:
                return None
            except ConflictError:
                current = await self._reread(path, current)
                continue
            except TransientError:
                await self._pause(attempt)
                current = await self._reread(path, current)
                continue
            finalizers = [
                f for f in current["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION
            ]
            with contextlib.suppress(DriverError):
                current = await self._set_finalizers(path, current, finalizers)
            return current
        raise TransientError(f"could not clear the allocation of {claim_name(claim)}")

    async def _set_finalizers(
        self, path: str, current: Mapping[str, Any], finalizers: list[str]
    ) -> dict[str, Any]:
        body = {
            "metadata": {
                "resourceVersion": current["metadata"]["resourceVersion"],
                "finalizers": finalizers or None,
            }
        }
        return await self.client.patch(path, body)

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
