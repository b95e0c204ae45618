"""The plugin's record of prepared claims, kept across restarts and reboots.

One JSON file, written atomically (temp file, fsync, rename, fsync of the
directory), versioned, with a SHA-256 checksum over its content and the node
boot id: after a reboot `/var/run/cdi` and the cache dirs are gone, so a
checkpoint from another boot means "re-prepare", not "already done".

Per claim the state is PrepareStarted (written before any side effect) or
PrepareCompleted (written last, with the answer kubelet got). A claim found
in PrepareStarted after a crash is rolled back and prepared again. A claim of
MIG partitions also records each instance: its intent (card, profile,
placement) in the PrepareStarted record before the create, then the instance
(GPU and compute instance ids, MIG uuid) once made (`mig_prepare`).

With hundreds of claims prepared, rewriting and fsyncing the whole file on
every change would make prepare slower the more the node holds: a large
checkpoint keeps its snapshot and appends each change to a journal beside it
(`checkpoint_journal`), rewritten into the snapshot once the journal outgrows
it; `CheckpointEncoder` re-encodes only the records that changed. The
snapshot's bytes are exactly `encode_checkpoint`'s, so files written by older
releases read the same.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.process.atomic_file import write_atomically
from kubeletplugin.checkpoint_journal import (
    JournalError,
    append_durably,
    journal_line,
    read_journal,
)

CHECKPOINT_MODE = 0o600
"""Only the plugin reads its checkpoint: it names every prepared claim and pod."""

CHECKPOINT_VERSION = 1

JOURNAL_SUFFIX = ".journal"
JOURNAL_FROM_BYTES = 64 * 1024
"""Snapshot size (about 120 one-device claims) from which stores append to the journal;
below it a rewrite costs about what an append does."""
JOURNAL_GROWTH = 2
"""The snapshot is rewritten once the journal is this many times its size."""


class CheckpointError(DriverError):
    """The checkpoint file exists but cannot be trusted (corrupt, wrong version)."""


class PrepareState(StrEnum):
    STARTED = "PrepareStarted"
    COMPLETED = "PrepareCompleted"


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as returned to kubelet."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str = ""
    uuid: str = ""
    memory_limit_bytes: int = 0
    core_limit: int = 0


@dataclass(frozen=True, slots=True)
class MigRecord:
    """A MIG instance prepare creates for a claim: first its intent (no ids yet),
    journalled before the create, then the instance it became.

    An intent without ids may or may not exist on the card (a crash can fall between
    the create and the record): roll back looks for it at its profile and placement."""

    gpu_uuid: str
    profile: str
    start: int
    size: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mig_uuid: str = ""

    @property
    def created(self) -> bool:
        return self.gpu_instance_id is not None


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """What the plugin did (or started doing) for one claim."""

    uid: str
    namespace: str
    name: str
    state: PrepareState
    devices: tuple[PreparedDevice, ...] = ()
    cache_nonce: str = ""
    pods: tuple[str, ...] = ()
    """`namespace/name` of the pods that had reserved the claim at prepare."""
    mig: tuple[MigRecord, ...] = ()
    """The MIG instances (or intents) of a claim of partitions, in result order."""


@dataclass(slots=True)
class Checkpoint:
    boot_id: str
    claims: dict[str, ClaimRecord] = field(default_factory=dict)


def _record_to_json(record: ClaimRecord) -> dict[str, Any]:
    encoded = {
        "uid": record.uid,
        "namespace": record.namespace,
        "name": record.name,
        "state": record.state.value,
        "cache_nonce": record.cache_nonce,
        "pods": list(record.pods),
        "devices": [
            {
                "request_names": list(d.request_names),
                "pool_name": d.pool_name,
                "device_name": d.device_name,
                "cdi_device_ids": list(d.cdi_device_ids),
                "share_id": d.share_id,
                "uuid": d.uuid,
                "memory_limit_bytes": d.memory_limit_bytes,
                "core_limit": d.core_limit,
            }
            for d in record.devices
        ],
    }
    if record.mig:
        # Only when present, so a checkpoint without partitions reads as older releases'.
        encoded["mig"] = [
            {
                "gpu_uuid": m.gpu_uuid,
                "profile": m.profile,
                "start": m.start,
                "size": m.size,
                "gpu_instance_id": m.gpu_instance_id,
                "compute_instance_id": m.compute_instance_id,
                "mig_uuid": m.mig_uuid,
            }
            for m in record.mig
        ]
    return encoded


def _record_from_json(data: dict[str, Any]) -> ClaimRecord:
    devices = tuple(
        PreparedDevice(
            **{
                **device,
                "request_names": tuple(device["request_names"]),
                "cdi_device_ids": tuple(device["cdi_device_ids"]),
            }
        )
        for device in data["devices"]
    )
    return ClaimRecord(
        uid=data["uid"],
        namespace=data["namespace"],
        name=data["name"],
        state=PrepareState(data["state"]),
        devices=devices,
        cache_nonce=data.get("cache_nonce", ""),
        pods=tuple(data.get("pods", ())),
        mig=tuple(MigRecord(**entry) for entry in data.get("mig", ())),
    )


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """`{"checksum": sha256(data), "data": ...}` with `data` in canonical JSON."""
    body = {
        "version": CHECKPOINT_VERSION,
        "bootID": checkpoint.boot_id,
        "claims": {uid: _record_to_json(r) for uid, r in checkpoint.claims.items()},
    }
    canonical = _canonical(body)
    checksum = hashlib.sha256(canonical).hexdigest()
    return b'{"checksum":"' + checksum.encode() + b'","data":' + canonical + b"}"


class CheckpointEncoder:
    """`encode_checkpoint`, re-encoding only the records that changed since the last call.

    Records are frozen, so a record object seen before has the same canonical JSON;
    a changed claim is a new record object. The body is assembled in `_canonical`'s
    order (keys sorted by code point), so the output is byte for byte the same. Not
    thread safe: one writer at a time (the plugin stores under its checkpoint lock).
    """

    def __init__(self) -> None:
        self._encoded: dict[str, tuple[ClaimRecord, bytes]] = {}

    def members(self, checkpoint: Checkpoint) -> dict[str, tuple[ClaimRecord, bytes]]:
        """Per uid, the record and its `"<uid>":{...}` member in canonical JSON."""
        previous = self._encoded
        current: dict[str, tuple[ClaimRecord, bytes]] = {}
        for uid, record in checkpoint.claims.items():
            known = previous.get(uid)
            if known is None or known[0] is not record:
                known = (record, _canonical({uid: _record_to_json(record)})[1:-1])
            current[uid] = known
        self._encoded = current
        return current

    def encode(self, checkpoint: Checkpoint) -> bytes:
        return self.encode_with_checksum(checkpoint)[0]

    def encode_with_checksum(self, checkpoint: Checkpoint) -> tuple[bytes, str]:
        current = self.members(checkpoint)
        claims = b",".join(current[uid][1] for uid in sorted(current))
        canonical = (
            b'{"bootID":'
            + _canonical(checkpoint.boot_id)
            + b',"claims":{'
            + claims
            + b'},"version":'
            + _canonical(CHECKPOINT_VERSION)
            + b"}"
        )
        checksum = hashlib.sha256(canonical).hexdigest()
        return b'{"checksum":"' + checksum.encode() + b'","data":' + canonical + b"}", checksum


def decode_checkpoint(raw: bytes) -> Checkpoint:
    return _decode(raw)[0]


def _decode(raw: bytes) -> tuple[Checkpoint, str]:
    """The snapshot and its checksum (which its journal lines name)."""
    try:
        envelope = json.loads(raw)
        body = envelope["data"]
        checksum = envelope["checksum"]
        if hashlib.sha256(_canonical(body)).hexdigest() != checksum:
            raise CheckpointError("checkpoint checksum mismatch")
        if body["version"] != CHECKPOINT_VERSION:
            raise CheckpointError(f"unsupported checkpoint version {body['version']!r}")
        claims = {uid: _record_from_json(data) for uid, data in body["claims"].items()}
        return Checkpoint(boot_id=body["bootID"], claims=claims), checksum
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint is not readable: {error!r}") from None


def _replay(checkpoint: Checkpoint, raw: bytes, base_checksum: str) -> None:
    """Apply the journal's entries for this snapshot to it, in order."""
    try:
        for entry in read_journal(raw, base_checksum):
            for uid in entry.delete:
                checkpoint.claims.pop(uid, None)
            for uid, data in entry.put.items():
                checkpoint.claims[uid] = _record_from_json(data)
    except JournalError as error:
        raise CheckpointError(str(error)) from None
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint journal is not readable: {error!r}") from None


class CheckpointFile:
    """Load and store the checkpoint at `path` (and its journal), owned by one plugin process.

    `legacy_path` is where an older release kept it: a checkpoint found only
    there is moved to `path` on load, so an upgrade keeps every prepared claim.
    Below `JOURNAL_FROM_BYTES` of snapshot every store rewrites the snapshot, as
    older releases did; above it stores append to the journal (`checkpoint_journal`).
    """

    def __init__(
        self,
        path: Path,
        boot_id: str,
        legacy_path: Path | None = None,
        *,
        journal_from_bytes: int = JOURNAL_FROM_BYTES,
    ) -> None:
        self.path = path
        self.journal_from_bytes = journal_from_bytes
        self.journal_path = path.with_name(path.name + JOURNAL_SUFFIX)
        self.boot_id = boot_id
        self.legacy_path = legacy_path
        self._encoder = CheckpointEncoder()
        self._on_disk: dict[str, ClaimRecord] | None = None
        """What snapshot and journal hold, when this object wrote the snapshot; None
        until then (after a load a torn last journal line must not be appended to)."""
        self._base_checksum = ""
        self._base_bytes = 0
        self._journal_bytes = 0

    def load(self) -> Checkpoint:
        """The checkpoint of this boot; empty when missing or from another boot."""
        if self.legacy_path is not None and not self.path.exists() and self.legacy_path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.replace(self.legacy_path, self.path)
        self._on_disk = None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Checkpoint(boot_id=self.boot_id)
        checkpoint, checksum = _decode(raw)
        if checkpoint.boot_id != self.boot_id:
            return Checkpoint(boot_id=self.boot_id)
        try:
            journal = self.journal_path.read_bytes()
        except FileNotFoundError:
            return checkpoint
        _replay(checkpoint, journal, checksum)
        return checkpoint

    def store(self, checkpoint: Checkpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            if not self._append(checkpoint):
                self._write_snapshot(checkpoint)
        except BaseException:
            self._on_disk = None
            raise

    def _append(self, checkpoint: Checkpoint) -> bool:
        """Journal what changed since the last store; False when a snapshot is due."""
        on_disk = self._on_disk
        if (
            on_disk is None
            or checkpoint.boot_id != self.boot_id
            or self._base_bytes < self.journal_from_bytes
            or self._journal_bytes > JOURNAL_GROWTH * self._base_bytes
        ):
            return False
        members = self._encoder.members(checkpoint)
        puts = [
            member for uid, (record, member) in members.items() if on_disk.get(uid) is not record
        ]
        deletes = [uid for uid in on_disk if uid not in members]
        if puts or deletes:
            line = journal_line(self._base_checksum, puts, deletes)
            append_durably(self.journal_path, line, CHECKPOINT_MODE)
            self._journal_bytes += len(line)
        self._on_disk = {uid: record for uid, (record, _) in members.items()}
        return True

    def _write_snapshot(self, checkpoint: Checkpoint) -> None:
        """The whole checkpoint, atomically; the journal it replaces goes (a journal
        left by a crash names the old snapshot, so it is ignored on load)."""
        content, checksum = self._encoder.encode_with_checksum(checkpoint)
        write_atomically(self.path, content, CHECKPOINT_MODE)
        self.journal_path.unlink(missing_ok=True)
        self._on_disk = dict(checkpoint.claims)
        self._base_checksum = checksum
        self._base_bytes = len(content)
        self._journal_bytes = 0


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    return path.read_text().strip()
