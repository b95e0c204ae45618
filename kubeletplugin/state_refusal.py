"""The kubelet plugin's answer to a checkpoint it must not use: refuse, report, touch nothing.

A checkpoint (or journal) written by a newer release in a schema this one does
not read (`CheckpointTooNewError`), or damaged (`CheckpointCorruptError`), has
two easy answers and both are wrong:

- Exiting puts the plugin into CrashLoopBackOff: nothing is gained, the reason
  ends in a log few read, and the node's claims cannot even be unprepared.
- Starting empty would make the plugin believe nothing is prepared: its start
  would sweep the CDI specs and cache dirs of running pods as orphans (a
  container restart then fails, libvgpu's regions go), its prepare would hand
  out shares those pods hold, and its next store would overwrite the file, so
  what the newer release knew would be lost for good.

So the plugin keeps running and refuses: it serves its sockets (the liveness
probe passes; kubelet's calls reach it), answers each claim of every
NodePrepareResources and NodeUnprepareResources with the refusal (kubelet
shows it on the pod), and reports it: a Warning Event `CheckpointRefused` on
the Node, `vgpu_dra_state_refused{file,reason}` = 1, and /readyz. It touches
nothing: no roll back, no orphan sweep, no checkpoint write, no MIG instance
created or destroyed, not even a leftover temp file removed.

Its ResourceSlices are neither published nor deleted; the ones published
before stay as they were. Publishing needs the checkpoint (the MIG instances
prepare made are told from an administrator's by their records), so a slice
published now could differ from what the cluster's allocations were made
against; deleting them would drop from the allocator's inventory the devices
running pods still hold. Left alone, the cluster's view of the node stays what
it was while an operator rolls the plugin forward or restores the file; the
plugin started after that reads it and publishes as usual. New claims can
still be allocated to the node meanwhile and fail at prepare with the refusal:
cordon the node to keep them off it (docs/upgrading.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import DriverError
from kubeletplugin.checkpoint_schema import CheckpointError

EVENT_REASON_STATE_REFUSED = "CheckpointRefused"
CHECKPOINT_FILE, JOURNAL_FILE = "checkpoint", "journal"
"""The `file` label of `vgpu_dra_state_refused`."""


class StateRefusedError(DriverError):
    """A claim neither prepared nor unprepared because the plugin refuses its checkpoint."""


@dataclass(frozen=True, slots=True)
class StateRefusal:
    """Why the plugin refuses to work, as every report of it says it."""

    file: str
    """`checkpoint` or `journal`."""
    reason: str
    """`newer_version` or `corrupt` (`CheckpointError.reason`)."""
    message: str
    """The error, naming the file, what was found and what to do."""

    @classmethod
    def of(cls, error: CheckpointError, journal_path: Path) -> StateRefusal:
        file = JOURNAL_FILE if error.path == str(journal_path) else CHECKPOINT_FILE
        return cls(file, error.reason, str(error))

    def claim_error(self, namespace: str, name: str, uid: str) -> StateRefusedError:
        return StateRefusedError(
            f"claim {namespace}/{name} ({uid}) left untouched: the kubelet plugin refuses "
            f"its {self.file}: {self.message}"
        )

    def readiness(self) -> str:
        return f"refusing its {self.file}: {self.message}"
