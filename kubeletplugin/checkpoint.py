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

What may change in the file between releases, and what a file this release
cannot read does (refused, never reset), is `checkpoint_schema`'s rule. The
only migrations on load are the move from `legacy_path` (one rename: a kill
before it leaves the old file, read again next start; with both files present
the new one wins and the old one is left and logged) and the first store's
rewrite of the snapshot (with this release's `writer`, the journal folded in:
a kill before the rename leaves the old snapshot, its journal and a temp file,
which the next load removes; a kill after it leaves a journal naming the old
snapshot, which is ignored).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from dra_driver.process.atomic_file import write_atomically
from kubeletplugin.checkpoint_journal import (
    JournalError,
    append_durably,
    fsync_directory,
    journal_line,
    read_journal,
    remove_durably,
)
from kubeletplugin.checkpoint_schema import (
    CHECKPOINT_VERSION,
    VERSION_KEY,
    WRITER_KEY,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointTooNewError,
    check_version,
    corrupt_problem,
    no_unknown,
    split_known,
    this_release,
)

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointEncoder",
    "CheckpointError",
    "CheckpointFile",
    "CheckpointTooNewError",
    "ClaimRecord",
    "MigRecord",
    "PrepareState",
    "PreparedDevice",
    "decode_checkpoint",
    "encode_checkpoint",
    "read_boot_id",
]

log = logging.getLogger(__name__)

CHECKPOINT_MODE = 0o600
"""Only the plugin reads its checkpoint: it names every prepared claim and pod."""

JOURNAL_SUFFIX = ".journal"
JOURNAL_FROM_BYTES = 64 * 1024
"""Snapshot size (about 120 one-device claims) from which stores append to the journal;
below it a rewrite costs about what an append does."""
JOURNAL_GROWTH = 2
"""The snapshot is rewritten once the journal is this many times its size."""


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
    unknown: Mapping[str, Any] = field(default_factory=no_unknown, hash=False)
    """Keys of the entry this release does not know, written back as read."""


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
    unknown: Mapping[str, Any] = field(default_factory=no_unknown, hash=False)
    """Keys of the entry this release does not know, written back as read."""

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
    unknown: Mapping[str, Any] = field(default_factory=no_unknown, hash=False)
    """Keys of the record this release does not know, written back as read."""


@dataclass(slots=True)
class Checkpoint:
    boot_id: str
    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    unknown: Mapping[str, Any] = field(default_factory=no_unknown)
    """Body keys this release does not know, written back as read (`writer` is this
    release's on every write, not kept)."""


def _json_keys(cls: type) -> frozenset[str]:
    """A record type's JSON keys: its field names, but `unknown`."""
    return frozenset(f.name for f in fields(cls)) - {"unknown"}


_DEVICE_KEYS = _json_keys(PreparedDevice)
_MIG_KEYS = _json_keys(MigRecord)
_RECORD_KEYS = _json_keys(ClaimRecord)
_BODY_KEYS = frozenset({VERSION_KEY, "bootID", "claims", WRITER_KEY})


def _with_unknown(encoded: dict[str, Any], unknown: Mapping[str, Any]) -> dict[str, Any]:
    return {**unknown, **encoded} if unknown else encoded


def _record_to_json(record: ClaimRecord) -> dict[str, Any]:
    encoded = {
        "uid": record.uid,
        "namespace": record.namespace,
        "name": record.name,
        "state": record.state.value,
        "cache_nonce": record.cache_nonce,
        "pods": list(record.pods),
        "devices": [
            _with_unknown(
                {
                    "request_names": list(d.request_names),
                    "pool_name": d.pool_name,
                    "device_name": d.device_name,
                    "cdi_device_ids": list(d.cdi_device_ids),
                    "share_id": d.share_id,
                    "uuid": d.uuid,
                    "memory_limit_bytes": d.memory_limit_bytes,
                    "core_limit": d.core_limit,
                },
                d.unknown,
            )
            for d in record.devices
        ],
    }
    if record.mig:
        # Only when present, so a checkpoint without partitions reads as older releases'.
        encoded["mig"] = [
            _with_unknown(
                {
                    "gpu_uuid": m.gpu_uuid,
                    "profile": m.profile,
                    "start": m.start,
                    "size": m.size,
                    "gpu_instance_id": m.gpu_instance_id,
                    "compute_instance_id": m.compute_instance_id,
                    "mig_uuid": m.mig_uuid,
                },
                m.unknown,
            )
            for m in record.mig
        ]
    return _with_unknown(encoded, record.unknown)


def _device_from_json(data: Mapping[str, Any]) -> PreparedDevice:
    known, unknown = split_known(data, _DEVICE_KEYS)
    return PreparedDevice(
        **{
            **known,
            "request_names": tuple(known["request_names"]),
            "cdi_device_ids": tuple(known["cdi_device_ids"]),
        },
        unknown=unknown,
    )


def _mig_from_json(data: Mapping[str, Any]) -> MigRecord:
    known, unknown = split_known(data, _MIG_KEYS)
    return MigRecord(**known, unknown=unknown)


def _record_from_json(data: Mapping[str, Any]) -> ClaimRecord:
    unknown = split_known(data, _RECORD_KEYS)[1]
    return ClaimRecord(
        uid=data["uid"],
        namespace=data["namespace"],
        name=data["name"],
        state=PrepareState(data["state"]),
        devices=tuple(_device_from_json(device) for device in data["devices"]),
        cache_nonce=data.get("cache_nonce", ""),
        pods=tuple(data.get("pods", ())),
        mig=tuple(_mig_from_json(entry) for entry in data.get("mig", ())),
        unknown=unknown,
    )


def _records_from_json(claims: Mapping[str, Any], where: str) -> dict[str, ClaimRecord]:
    """Every record, or `ValueError` naming the claim whose record does not read."""
    records = {}
    for uid, data in claims.items():
        try:
            records[uid] = _record_from_json(data)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{where}claim {uid}: {_problem(error)}") from None
    return records


def _problem(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"key {error.args[0]!r} missing"
    return f"{type(error).__name__}: {error}"


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _head(checkpoint: Checkpoint, writer: str) -> dict[str, Any]:
    """The body but its claims: the unknown keys kept, then this release's own."""
    return {
        **checkpoint.unknown,
        VERSION_KEY: CHECKPOINT_VERSION,
        "bootID": checkpoint.boot_id,
        WRITER_KEY: writer,
    }


def encode_checkpoint(checkpoint: Checkpoint, writer: str | None = None) -> bytes:
    """`{"checksum": sha256(data), "data": ...}` with `data` in canonical JSON; `writer`
    is the release named in it (this one by default)."""
    body = _head(checkpoint, writer or this_release())
    body["claims"] = {uid: _record_to_json(r) for uid, r in checkpoint.claims.items()}
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

    def __init__(self, writer: str | None = None) -> None:
        self.writer = writer or this_release()
        self._encoded: dict[str, tuple[ClaimRecord, bytes]] = {}
        self._around: tuple[str, Mapping[str, Any], bytes, bytes] | None = None
        """The body's bytes before and after the claims' members, for a boot id and
        `unknown`: the same on every store of a plugin's life."""

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
        before, after = self._around_claims(checkpoint)
        canonical = before + b",".join(current[uid][1] for uid in sorted(current)) + after
        checksum = hashlib.sha256(canonical).hexdigest()
        return b'{"checksum":"' + checksum.encode() + b'","data":' + canonical + b"}", checksum

    def _around_claims(self, checkpoint: Checkpoint) -> tuple[bytes, bytes]:
        """`{<members sorted before "claims">,"claims":{` and `}<members after>}`."""
        around = self._around
        if around is None or around[0] != checkpoint.boot_id or around[1] is not checkpoint.unknown:
            members = sorted(
                (key, _canonical(key) + b":" + _canonical(value))
                for key, value in _head(checkpoint, self.writer).items()
            )
            before = [member for key, member in members if key < "claims"]
            after = [member for key, member in members if key > "claims"]
            around = (
                checkpoint.boot_id,
                checkpoint.unknown,
                b"{" + b"".join(member + b"," for member in before) + b'"claims":{',
                b"}" + b"".join(b"," + member for member in after) + b"}",
            )
            self._around = around
        return around[2], around[3]


def decode_checkpoint(raw: bytes, path: Path | str = "checkpoint") -> Checkpoint:
    """The checkpoint in `raw`, read from `path` (named in errors)."""
    return _decode(raw, path).checkpoint


class _Snapshot(NamedTuple):
    checkpoint: Checkpoint
    checksum: str
    """What its journal lines name."""
    writer: str | None
    """The release that wrote it; None for 0.1.0, which wrote no `writer`."""


def _decode(raw: bytes, path: Path | str) -> _Snapshot:
    """The snapshot, or `CheckpointTooNewError` / `CheckpointCorruptError` naming `path`."""
    if not raw:
        raise CheckpointCorruptError(path, corrupt_problem("the file is empty"))
    try:
        envelope = json.loads(raw)
    except ValueError as error:
        raise CheckpointCorruptError(
            path, corrupt_problem(f"not valid JSON, truncated or damaged ({error})")
        ) from None
    body = envelope.get("data") if isinstance(envelope, dict) else None
    if not isinstance(body, dict):
        raise CheckpointCorruptError(path, corrupt_problem("no `data` object in the file"))
    check_version(body, path)
    checksum = envelope.get("checksum")
    if not isinstance(checksum, str) or hashlib.sha256(_canonical(body)).hexdigest() != checksum:
        raise CheckpointCorruptError(
            path,
            corrupt_problem(
                "checksum mismatch: the file was changed or damaged after it was written"
            ),
        )
    try:
        if not isinstance(body.get("bootID"), str) or not isinstance(body.get("claims"), dict):
            raise ValueError("data.bootID or data.claims missing or of the wrong type")
        claims = _records_from_json(body["claims"], "")
    except ValueError as error:
        raise CheckpointCorruptError(path, corrupt_problem(str(error))) from None
    writer = body.get(WRITER_KEY)
    checkpoint = Checkpoint(body["bootID"], claims, split_known(body, _BODY_KEYS)[1])
    return _Snapshot(checkpoint, checksum, writer if isinstance(writer, str) else None)


def _replay(checkpoint: Checkpoint, raw: bytes, base_checksum: str, path: Path) -> None:
    """Apply the journal's entries for this snapshot to it, in order."""
    try:
        for entry in read_journal(raw, base_checksum):
            for uid in entry.delete:
                checkpoint.claims.pop(uid, None)
            checkpoint.claims.update(_records_from_json(entry.put, "a line's "))
    except (JournalError, ValueError) as error:
        raise CheckpointCorruptError(path, corrupt_problem(str(error))) from None
    except (TypeError, AttributeError) as error:
        raise CheckpointCorruptError(path, corrupt_problem(_problem(error))) from None


class CheckpointFile:
    """Load and store the checkpoint at `path` (and its journal), owned by one plugin process.

    `legacy_path` is where development builds before 0.1.0 kept it: a checkpoint
    found only there is moved to `path` on load, so an upgrade keeps every prepared
    claim; one found there beside a checkpoint at `path` is left alone. Below
    `JOURNAL_FROM_BYTES` of snapshot every store rewrites the snapshot, as older
    releases did; above it stores append to the journal (`checkpoint_journal`).
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
        """The checkpoint of this boot; empty when missing or from another boot.

        A file this release must not use (`CheckpointTooNewError`, `CheckpointCorruptError`)
        raises and is left as it is, with its journal and any temp file beside it."""
        self._adopt_legacy()
        self._on_disk = None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self._remove_temp_files()
            return Checkpoint(boot_id=self.boot_id)
        snapshot = _decode(raw, self.path)
        checkpoint = snapshot.checkpoint
        if checkpoint.boot_id == self.boot_id:
            try:
                journal = self.journal_path.read_bytes()
            except FileNotFoundError:
                pass
            else:
                _replay(checkpoint, journal, snapshot.checksum, self.journal_path)
        self._remove_temp_files()
        log.info(
            "checkpoint read",
            extra={
                "path": str(self.path),
                "writer": snapshot.writer or "0.1.0 (no writer recorded)",
                "claims": len(checkpoint.claims),
                "same_boot": checkpoint.boot_id == self.boot_id,
            },
        )
        if checkpoint.boot_id != self.boot_id:
            return Checkpoint(boot_id=self.boot_id)
        return checkpoint

    def _adopt_legacy(self) -> None:
        """Move a checkpoint from `legacy_path` (one rename, so a kill leaves it at one of
        the two places); never over a checkpoint already at `path`."""
        legacy = self.legacy_path
        if legacy is None or not legacy.exists():
            return
        context = {"path": str(self.path), "legacy_path": str(legacy)}
        if self.path.exists():
            log.warning(
                "checkpoint at the old location left alone: the new one is used", extra=context
            )
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(legacy, self.path)
        fsync_directory(self.path.parent)
        fsync_directory(legacy.parent)
        log.info("checkpoint moved from the old location", extra=context)

    def _remove_temp_files(self) -> None:
        """What a kill during `write_atomically` left: `.<name>.<8 random characters>`
        (its `mkstemp` names), never read and never renamed now."""
        pattern = re.compile(re.escape(f".{self.path.name}.") + r"[a-z0-9_]{8}")
        try:
            entries = list(os.scandir(self.path.parent))
        except FileNotFoundError:
            return
        for entry in entries:
            if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                log.info(
                    "temp file of an interrupted checkpoint write removed",
                    extra={"path": entry.path},
                )

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
        left by a crash names the old snapshot, so it is ignored on load), durably: a
        snapshot of the same bytes as the one the journal names (the journal's changes
        cancelled out) would otherwise have that journal replayed on it after a power
        loss, bringing back a claim this store removed."""
        content, checksum = self._encoder.encode_with_checksum(checkpoint)
        write_atomically(self.path, content, CHECKPOINT_MODE)
        remove_durably(self.journal_path)
        self._on_disk = dict(checkpoint.claims)
        self._base_checksum = checksum
        self._base_bytes = len(content)
        self._journal_bytes = 0


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    return path.read_text().strip()
