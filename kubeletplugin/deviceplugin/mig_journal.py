"""The device plugin's record of the MIG instances it created, kept across its restarts.

Why a file and not only the pods' annotations: a pod's `hami.io/vgpu-mig-allocations`
says which instance it holds, but once the pod object is gone (deleted while the
device plugin was down) nothing in the API names that instance any more, and on the
card it looks like any other: an administrator's static layout, or a partition the
DRA kubelet plugin prepared on a mixed node. The reconciler (`mig_reconcile`) only
ever destroys an instance this file lists, so it never touches one it did not make.

An entry is written right after Allocate creates the instance, before the pod is
patched, and names the pod (namespace, name, uid) it was made for; an instance an
Allocate reuses is handed to that pod. An entry is dropped once its instance is
destroyed or no longer on its card. A crash between the create and the write
leaves an instance no entry names: it is kept (a leak an administrator sees in
`nvidia-smi mig -lgi`), never guessed at.

The file carries the node's boot id: MIG instances do not survive a reboot, so the
entries of another boot name nothing and are dropped when read, before a new
instance could reuse their ids.

It carries a schema `version` (1) and the release that wrote it (`writer`). A
release adding or changing a key bumps the version: this one writes back only the
keys it knows. A file this release cannot read (a newer version, or damaged) is
never replaced or reset: until it reads again (rolled forward, or moved aside by
an administrator) every MIG Allocate on the node is refused with the file and the
reason, and the reconciler destroys nothing; other Allocates are not affected. It
is read again on each use, so moving it aside needs no restart.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.objects.mig_profiles import Placement
from dra_driver.process.atomic_file import write_atomically
from dra_driver.version import build_info
from kubeletplugin.checkpoint import read_boot_id
from kubeletplugin.deviceplugin.allocation import PodRef
from kubeletplugin.mig_state import MigInstance

log = logging.getLogger(__name__)

JOURNAL_VERSION = 1
JOURNAL_MODE = 0o600
"""Only the device plugin reads it: it names pods and the instances they hold."""


class MigJournalError(DriverError):
    """The record of created MIG instances cannot be read or written; names the file."""


class MigJournalRefusedError(MigJournalError):
    """The record exists but this release must not use it (newer version, damaged)."""


InstanceKey = tuple[str, int, int, str]
"""(card uuid, GPU instance id, compute instance id, MIG uuid): one MIG device."""


@dataclass(frozen=True, slots=True)
class MigRecord:
    """A MIG instance the device plugin created, and the pod it holds it for."""

    pod: PodRef
    pod_uid: str
    gpu_uuid: str
    instance: MigInstance

    @property
    def key(self) -> InstanceKey:
        return instance_key(self.gpu_uuid, self.instance)


def instance_key(gpu_uuid: str, instance: MigInstance) -> InstanceKey:
    return (gpu_uuid, instance.gpu_instance_id, instance.compute_instance_id, instance.uuid)


class MigJournal:
    """The file, read once (lazily, in the caller's thread) and rewritten on each change.

    Calls block; callers serialise them (the device plugin's Allocate lock)."""

    def __init__(self, path: Path, boot_id_file: Path) -> None:
        self.path = path
        self.boot_id_file = boot_id_file
        self._records: dict[InstanceKey, MigRecord] | None = None
        self._boot_id = ""
        self._refusal_logged = False
        self._lock = threading.Lock()

    def records(self) -> tuple[MigRecord, ...]:
        with self._lock:
            return tuple(self._loaded().values())

    def add(self, pod: PodRef, pod_uid: str, gpu_uuid: str, instance: MigInstance) -> None:
        """Record an instance just created for the pod."""
        with self._lock:
            records = dict(self._loaded())
            record = MigRecord(pod, pod_uid, gpu_uuid, instance)
            records[record.key] = record
            self._store(records)

    def hand_over(self, pod: PodRef, pod_uid: str, gpu_uuid: str, instance: MigInstance) -> None:
        """An Allocate reused the instance for the pod: if the plugin made it, the pod
        now holds it (so it is not destroyed when its earlier holder ends)."""
        with self._lock:
            records = self._loaded()
            key = instance_key(gpu_uuid, instance)
            record = records.get(key)
            if record is None or (record.pod, record.pod_uid) == (pod, pod_uid):
                return
            self._store({**records, key: replace(record, pod=pod, pod_uid=pod_uid)})

    def forget(self, keys: Iterable[InstanceKey]) -> None:
        """Drop the entries of instances destroyed or gone."""
        dropped = set(keys)
        with self._lock:
            records = self._loaded()
            kept = {key: record for key, record in records.items() if key not in dropped}
            if len(kept) != len(records):
                self._store(kept)

    def _loaded(self) -> dict[InstanceKey, MigRecord]:
        """The records; a file that must not be used raises on every call (and is logged
        once), so nothing is written over it."""
        if self._records is None:
            self._boot_id = _boot_id(self.boot_id_file)
            try:
                self._records = _read(self.path, self._boot_id)
            except MigJournalRefusedError as error:
                if not self._refusal_logged:
                    log.error(
                        "MIG instance record refused: MIG Allocates are refused and no "
                        "instance is destroyed until it reads",
                        extra={"path": str(self.path), "error": str(error)},
                    )
                    self._refusal_logged = True
                raise
        return self._records

    def _store(self, records: dict[InstanceKey, MigRecord]) -> None:
        document = {
            "version": JOURNAL_VERSION,
            "writer": build_info().version,
            "bootID": self._boot_id,
            "instances": [_encode(record) for record in records.values()],
        }
        content = json.dumps(document, sort_keys=True).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, content, JOURNAL_MODE)
        except OSError as error:
            raise MigJournalError(
                f"MIG instance record {self.path} not written: {error.strerror or error}"
            ) from error
        self._records = records


def _boot_id(path: Path) -> str:
    try:
        return read_boot_id(path)
    except OSError as error:
        raise MigJournalError(
            f"boot id {path} not read ({error.strerror or error}): MIG instances cannot "
            "be told from another boot's"
        ) from error


def _read(path: Path, boot_id: str) -> dict[InstanceKey, MigRecord]:
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise MigJournalError(f"{path}: cannot read: {error.strerror or error}") from error
    except ValueError as error:
        raise _damaged(path, f"not JSON ({error})") from None
    if not isinstance(document, dict):
        raise _damaged(path, "not a JSON object")
    version = document.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > JOURNAL_VERSION:
        writer = document.get("writer")
        by = f" (written by vgpu-dra-driver {writer})" if isinstance(writer, str) else ""
        raise MigJournalRefusedError(
            f"{path}: version {version}{by}; this release reads version {JOURNAL_VERSION}: "
            "roll the device plugin forward to that release or later (docs/upgrading.md)"
        )
    if version != JOURNAL_VERSION:
        raise _damaged(path, f"version {version!r}, expected {JOURNAL_VERSION}")
    if document.get("bootID") != boot_id:
        log.info(
            "MIG instance record of another boot dropped: its instances went with it",
            extra={"path": str(path), "recorded_boot": document.get("bootID"), "boot": boot_id},
        )
        return {}
    records = {}
    for position, item in enumerate(document.get("instances") or []):
        try:
            record = _decode(item)
        except (KeyError, TypeError, ValueError) as error:
            raise _damaged(path, f"instances[{position}]: {error!r}") from None
        records[record.key] = record
    return records


def _damaged(path: Path, reason: str) -> MigJournalRefusedError:
    return MigJournalRefusedError(
        f"{path}: {reason}: restore it, or move it aside (the instances it names are then "
        "left on their cards for an administrator to remove; docs/mig.md)"
    )


def _encode(record: MigRecord) -> dict[str, Any]:
    instance = record.instance
    return {
        "pod": {"namespace": record.pod.namespace, "name": record.pod.name, "uid": record.pod_uid},
        "gpuUUID": record.gpu_uuid,
        "profile": instance.profile,
        "placement": {"start": instance.placement.start, "size": instance.placement.size},
        "gpuInstanceID": instance.gpu_instance_id,
        "computeInstanceID": instance.compute_instance_id,
        "migUUID": instance.uuid,
    }


def _decode(item: dict[str, Any]) -> MigRecord:
    pod, placement = item["pod"], item["placement"]
    return MigRecord(
        pod=PodRef(str(pod["namespace"]), str(pod["name"])),
        pod_uid=str(pod["uid"]),
        gpu_uuid=str(item["gpuUUID"]),
        instance=MigInstance(
            gpu_instance_id=int(item["gpuInstanceID"]),
            compute_instance_id=int(item["computeInstanceID"]),
            profile=str(item["profile"]),
            placement=Placement(int(placement["start"]), int(placement["size"])),
            uuid=str(item["migUUID"]),
        ),
    )
