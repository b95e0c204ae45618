"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

Only the holder of the Lease works; the others wait. A holder renews every
`retry_period_s`; if it cannot renew for `renew_deadline_s` it stops working
at once (before anyone else may take over: the deadline is shorter than the
lease). A candidate takes the Lease over when it has not seen it change for
`lease_duration_s` by its own clock (clocks of different machines are never
compared). Every write is conditional on the resourceVersion read, so two
candidates can never both win: the loser gets 409.

Times are written with exactly six fractional digits, which the API server
requires for `acquireTime`/`renewTime` (MicroTime).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.rest import ApiError, ConflictError, KubeClient, NotFoundError, object_path
from dra_driver.objects.api_time import micro_time

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    namespace: str
    name: str
    identity: str
    lease_duration_s: float = 15.0
    """How long a lease is honoured without renewal (client-go default 15 s)."""

    renew_deadline_s: float = 10.0
    """The holder gives up leading if it could not renew for this long (< lease duration)."""

    retry_period_s: float = 2.0
    """Between two attempts to acquire or renew."""


class LeadershipLostError(DriverError):
    """The lease could not be renewed in time: stop working, start afresh."""


class LeaderElector:
    """`await elector.run(work)`: wait for the lease, run `work(stop)` while holding it."""

    def __init__(
        self,
        client: KubeClient,
        settings: LeaderSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self.is_leader = asyncio.Event()
        self._observed: tuple[str, float] = ("", 0.0)
        self._lease: dict[str, Any] | None = None

    @property
    def _path(self) -> str:
        collection = f"/apis/coordination.k8s.io/v1/namespaces/{self.settings.namespace}/leases"
        return object_path(collection, self.settings.name)

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Acquire, then run `work` while renewing; raise LeadershipLostError if renewal fails.

        Returns when `work` returns (the lease is then released for a quick handover).
        """
        await self._acquire()
        self.is_leader.set()
        log.info("became leader", extra={"identity": self.settings.identity})
        work_task = asyncio.create_task(work(), name="leader work")
        renew_task = asyncio.create_task(self._renew_loop(), name="lease renewal")
        try:
            done, _ = await asyncio.wait(
                {work_task, renew_task}, return_when=asyncio.FIRST_COMPLETED
            )
            if renew_task in done:
                work_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work_task
                renew_task.result()
            await work_task
            await self._release()
        finally:
            self.is_leader.clear()
            for task in (work_task, renew_task):
                task.cancel()
            for task in (work_task, renew_task):
                with contextlib.suppress(asyncio.CancelledError, LeadershipLostError):
                    await task

    async def _acquire(self) -> None:
        while True:
            with contextlib.suppress(TransientError, ConflictError):
                if await self._try_acquire_or_renew():
                    return
            await asyncio.sleep(self.settings.retry_period_s * random.uniform(1.0, 1.2))

    async def _renew_loop(self) -> None:
        last_renewed = self.clock()
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            try:
                renewed = await self._try_acquire_or_renew()
            except (TransientError, ConflictError) as error:
                log.warning("lease renewal failed", extra={"error": str(error)})
                renewed = False
            if renewed:
                last_renewed = self.clock()
            elif (
                self._lease is not None and self._holder(self._lease) != self.settings.identity
            ) or self.clock() - last_renewed > self.settings.renew_deadline_s:
                name, identity = self.settings.name, self.settings.identity
                raise LeadershipLostError(f"lease {name} lost by {identity}")

    @staticmethod
    def _holder(lease: dict[str, Any]) -> str:
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    async def _try_acquire_or_renew(self) -> bool:
        now = micro_time()
        try:
            lease = await self.client.get(self._path)
        except NotFoundError:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
                "spec": self._spec(now, now, 0),
            }
            collection = self._path.rsplit("/", 1)[0]
            self._lease = await self.client.create(collection, body)
            return True
        self._lease = lease
        spec = lease.get("spec") or {}
        holder = self._holder(lease)
        version = lease["metadata"].get("resourceVersion", "")
        if version != self._observed[0]:
            self._observed = (version, self.clock())
        expired = self.clock() - self._observed[1] > float(
            spec.get("leaseDurationSeconds") or self.settings.lease_duration_s
        )
        if holder and holder != self.settings.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.settings.identity:
            acquired = spec.get("acquireTime") or now
        else:
            acquired, transitions = now, transitions + (1 if holder else 0)
        body = {**lease, "spec": self._spec(acquired, now, transitions)}
        try:
            self._lease = await self.client.replace(self._path, body)
        except ApiError as error:
            if isinstance(error, ConflictError | TransientError):
                raise
            raise TransientError(str(error)) from error
        self._observed = (self._lease["metadata"].get("resourceVersion", ""), self.clock())
        return True

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": max(1, round(self.settings.lease_duration_s)),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    async def _release(self) -> None:
        """Hand the lease back (holder cleared) so a successor need not wait it out."""
        if self._lease is None or self._holder(self._lease) != self.settings.identity:
            return
        spec = {**(self._lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1}
        with contextlib.suppress(DriverError):
            await self.client.replace(self._path, {**self._lease, "spec": spec})
