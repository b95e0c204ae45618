"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

Only the holder of the Lease works; the others wait. A holder renews every
`retry_period_s`; if it cannot renew for `renew_deadline_s` it stops working
at once (before anyone else may take over: the deadline is shorter than the
lease). A candidate takes the Lease over when it has not seen it change for
`lease_duration_s` by its own clock (clocks of different machines are never
compared). Every write is conditional on the resourceVersion read, so two
candidates can never both win: the loser gets 409.

Learning of a lost lease only when the renewal loop next runs is too late: a
leader paused past its lease (SIGSTOP, a long GC pause, a starved node) resumes
with decisions in flight while a successor already hands out the same capacity.
So leadership is a fence the writer checks right before each write (`check`):
it holds only while the last successful renewal *began* less than
`renew_deadline_s` ago on this process's monotonic clock. A successor takes over
no earlier than `lease_duration_s` after it saw that renewal land, so a write
checked in time reaches the API server before any successor may write, unless
it is held up for longer than `lease_duration_s - renew_deadline_s` (5 s by
default) between the check and its arrival. The API server closes that window
too: deploy/components/controller/ ships an admission policy that refuses a
claim write from a replica that is not the Lease's holder.

Each renewal attempt is bounded by what is left of the renew deadline, so an API
server that holds requests (etcd down) cannot keep a leader past its lease.

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
from typing import Any, Protocol

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


class WriteFence(Protocol):
    """Checked right before a write only the leader may make."""

    def check(self) -> None:
        """Return if the write may go out now; raise LeadershipLostError otherwise."""


class NoFence:
    """A single replica without leader election: every write may go out."""

    def check(self) -> None:
        return None


NO_FENCE = NoFence()


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
        self._renewed_at: float | None = None
        """When the last successful acquire or renewal began, on `clock`."""
        self._lost = asyncio.Event()
        """Set by a failed `check`, so the work stops without waiting for the renewal."""
        self._lost_reason = ""

    @property
    def _path(self) -> str:
        collection = f"/apis/coordination.k8s.io/v1/namespaces/{self.settings.namespace}/leases"
        return object_path(collection, self.settings.name)

    def check(self) -> None:
        """The write fence: raise LeadershipLostError unless this replica leads and its
        last successful renewal began less than the renew deadline ago."""
        if not self.is_leader.is_set() or self._renewed_at is None:
            raise LeadershipLostError(f"{self.settings.identity} does not lead")
        since = self.clock() - self._renewed_at
        if since >= self.settings.renew_deadline_s:
            self._step_down(
                f"lease {self.settings.name} not renewed by {self.settings.identity} for "
                f"{since:.1f} s (renew deadline {self.settings.renew_deadline_s:g} s): "
                "write dropped, stepping down"
            )
            raise LeadershipLostError(self._lost_reason)

    def _step_down(self, reason: str) -> None:
        if not self._lost.is_set():
            self._lost_reason = reason
        self.is_leader.clear()
        self._lost.set()

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Acquire, then run `work` while renewing; raise LeadershipLostError if renewal
        fails or a write found the lease stale (`work` is cancelled first).

        Returns when `work` returns (the lease is then released for a quick handover).
        """
        self._lost.clear()
        self._lost_reason = ""
        self._renewed_at = None
        await self._acquire()
        self.is_leader.set()
        log.info("became leader", extra={"identity": self.settings.identity})
        work_task = asyncio.create_task(work(), name="leader work")
        renew_task = asyncio.create_task(self._renew_loop(), name="lease renewal")
        lost_task = asyncio.create_task(self._lost.wait(), name="leadership lost")
        try:
            done, _ = await asyncio.wait(
                {work_task, renew_task, lost_task}, return_when=asyncio.FIRST_COMPLETED
            )
            if work_task not in done:
                self._step_down(f"lease {self.settings.name} lost by {self.settings.identity}")
                work_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work_task
                if renew_task in done:
                    renew_task.result()
                raise LeadershipLostError(self._lost_reason)
            await work_task
            await self._release()
        finally:
            self.is_leader.clear()
            tasks = (work_task, renew_task, lost_task)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, LeadershipLostError):
                    await task

    async def campaign(self, work: Callable[[], Awaitable[None]]) -> None:
        """Lead whenever elected: a lost lease cancels `work`, and this replica stands as
        a candidate again rather than exiting; returns when `work` returns."""
        while True:
            try:
                await self.run(work)
            except LeadershipLostError as error:
                log.warning(
                    "leadership lost: work stopped, standing as a candidate again",
                    extra={"identity": self.settings.identity, "error": str(error)},
                )
            else:
                return

    async def _acquire(self) -> None:
        while True:
            try:
                if await self._try_acquire_or_renew():
                    return
            except ConflictError:
                pass
            except TransientError as error:
                log.warning(
                    "lease unreachable while standing as a candidate",
                    extra={"identity": self.settings.identity, "error": str(error)},
                )
            await asyncio.sleep(self.settings.retry_period_s * random.uniform(1.0, 1.2))

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            left = self._deadline_left()
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    renewed = await self._try_acquire_or_renew()
            except TimeoutError:
                renewed = False
                log.warning(
                    "lease renewal unanswered at the renew deadline",
                    extra={"identity": self.settings.identity, "waited_s": round(left, 3)},
                )
            except (TransientError, ConflictError) as error:
                log.warning("lease renewal failed", extra={"error": str(error)})
                renewed = False
            if renewed:
                continue
            lost_to = self._holder(self._lease) if self._lease is not None else ""
            if (lost_to and lost_to != self.settings.identity) or self._deadline_left() <= 0:
                name, identity = self.settings.name, self.settings.identity
                self._step_down(f"lease {name} lost by {identity}")
                raise LeadershipLostError(self._lost_reason)

    def _deadline_left(self) -> float:
        """Seconds until the renew deadline, counted from the last successful renewal."""
        renewed_at = self.clock() if self._renewed_at is None else self._renewed_at
        return self.settings.renew_deadline_s - (self.clock() - renewed_at)

    @staticmethod
    def _holder(lease: dict[str, Any]) -> str:
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt; on success the fence counts from when the attempt began (the
        lease was renewed no earlier than that)."""
        began = self.clock()
        if await self._write_lease():
            self._renewed_at = began
            return True
        return False

    async def _write_lease(self) -> bool:
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
