"""Checkpoint: round trip, checksum, boot id, atomic replace."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointEncoder,
    CheckpointError,
    CheckpointFile,
    ClaimRecord,
    PreparedDevice,
    PrepareState,
    decode_checkpoint,
    encode_checkpoint,
)

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
devices = st.builds(
    PreparedDevice,
    request_names=st.lists(names, max_size=2).map(tuple),
    pool_name=names,
    device_name=names,
    cdi_device_ids=st.lists(names, max_size=2).map(tuple),
    share_id=names,
    uuid=names,
    memory_limit_bytes=st.integers(0, 1 << 40),
    core_limit=st.integers(0, 100),
)
records = st.builds(
    ClaimRecord,
    uid=names,
    namespace=names,
    name=names,
    state=st.sampled_from(PrepareState),
    devices=st.lists(devices, max_size=3).map(tuple),
    cache_nonce=names,
    pods=st.lists(names, max_size=2).map(tuple),
)


@given(names, st.dictionaries(names, records, max_size=3))
def test_round_trip(boot_id, claims):
    checkpoint = Checkpoint(boot_id, claims)
    assert decode_checkpoint(encode_checkpoint(checkpoint)) == checkpoint


def record(uid: str = "u1") -> ClaimRecord:
    device = PreparedDevice(("gpu",), "node-a", "gpu-0", ("k8s.vgpu.hami.io/claim=u1-gpu-0",))
    return ClaimRecord(uid, "ns", "claim", PrepareState.COMPLETED, (device,))


def test_store_then_load_same_boot(tmp_path: Path):
    file = CheckpointFile(tmp_path / "plugin" / "checkpoint.json", boot_id="boot-1")
    file.store(Checkpoint("boot-1", {"u1": record()}))
    assert file.load().claims == {"u1": record()}
    assert (tmp_path / "plugin" / "checkpoint.json").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in (tmp_path / "plugin").iterdir()] == ["checkpoint.json"]


def test_other_boot_reads_as_empty(tmp_path: Path):
    CheckpointFile(tmp_path / "c.json", "boot-1").store(Checkpoint("boot-1", {"u1": record()}))
    assert CheckpointFile(tmp_path / "c.json", "boot-2").load().claims == {}


def test_missing_file_is_empty(tmp_path: Path):
    assert CheckpointFile(tmp_path / "c.json", "b").load() == Checkpoint("b")


def test_tampered_content_fails_the_checksum(tmp_path: Path):
    path = tmp_path / "c.json"
    CheckpointFile(path, "b").store(Checkpoint("b", {"u1": record()}))
    path.write_text(path.read_text().replace("gpu-0", "gpu-1"))
    with pytest.raises(CheckpointError, match="checksum"):
        CheckpointFile(path, "b").load()


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"checksum": "x"}'])
def test_garbage_is_a_typed_error(raw: bytes):
    with pytest.raises(CheckpointError):
        decode_checkpoint(raw)


def test_replace_is_atomic_for_open_readers(tmp_path: Path):
    path = tmp_path / "c.json"
    file = CheckpointFile(path, "b")
    file.store(Checkpoint("b", {"u1": record("u1")}))
    with path.open("rb") as old:
        file.store(Checkpoint("b", {"u2": record("u2")}))
        assert decode_checkpoint(old.read()).claims.keys() == {"u1"}
    assert file.load().claims.keys() == {"u2"}
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_a_record_written_before_pods_were_kept_reads_with_none(tmp_path: Path):
    """Checkpoints of the previous release have no `pods`; they still load."""
    file = CheckpointFile(tmp_path / "checkpoint.json", "boot-1")
    file.store(Checkpoint("boot-1", {"u1": record()}))
    body = json.loads(file.path.read_bytes())["data"]
    del body["claims"]["u1"]["pods"]
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    envelope = {"checksum": hashlib.sha256(canonical).hexdigest(), "data": body}
    file.path.write_text(json.dumps(envelope))
    assert file.load().claims["u1"].pods == ()


def test_a_checkpoint_left_at_the_legacy_path_is_moved(tmp_path: Path):
    legacy = tmp_path / "checkpoint.json"
    CheckpointFile(legacy, "boot-1").store(Checkpoint("boot-1", {"u1": record()}))
    moved = CheckpointFile(tmp_path / "state" / "checkpoint.json", "boot-1", legacy_path=legacy)
    assert moved.load().claims == {"u1": record()}
    assert moved.path.exists() and not legacy.exists()


@given(names, st.lists(st.dictionaries(names, records, max_size=4), min_size=1, max_size=4))
def test_the_incremental_encoder_writes_encode_checkpoints_bytes(boot_id, states):
    """Each store re-encodes only changed records; what it writes must not depend on that."""
    encoder = CheckpointEncoder()
    for claims in states:
        checkpoint = Checkpoint(boot_id, claims)
        assert encoder.encode(checkpoint) == encode_checkpoint(checkpoint)


def test_a_record_replaced_under_the_same_uid_is_encoded_anew(tmp_path: Path):
    """A claim's record is replaced (PrepareStarted, then PrepareCompleted), never
    mutated: the new object's content is what the file holds."""
    file = CheckpointFile(tmp_path / "c.json", "b")
    started = ClaimRecord("u1", "ns", "claim", PrepareState.STARTED)
    file.store(Checkpoint("b", {"u1": started, "u2": record("u2")}))
    file.store(Checkpoint("b", {"u1": record("u1"), "u2": record("u2")}))
    assert file.load().claims == {"u1": record("u1"), "u2": record("u2")}
    file.store(Checkpoint("b", {"u2": record("u2")}))
    assert file.load().claims == {"u2": record("u2")}


def journaled(tmp_path: Path) -> CheckpointFile:
    """A checkpoint file that journals from its first snapshot on."""
    return CheckpointFile(tmp_path / "checkpoint.json", "b", journal_from_bytes=1)


@given(st.lists(st.dictionaries(names, records, max_size=4), min_size=1, max_size=6))
def test_a_journaled_checkpoint_loads_as_the_last_state_stored(states):
    with tempfile.TemporaryDirectory() as directory:
        file = journaled(Path(directory))
        for claims in states:
            file.store(Checkpoint("b", dict(claims)))
            assert journaled(Path(directory)).load() == Checkpoint("b", dict(claims))


def test_stores_past_the_threshold_append_and_leave_the_snapshot_alone(tmp_path: Path):
    file = journaled(tmp_path)
    file.store(Checkpoint("b", {"u1": record("u1")}))
    snapshot = file.path.read_bytes()
    file.store(Checkpoint("b", {"u1": record("u1"), "u2": record("u2")}))
    file.store(Checkpoint("b", {"u2": record("u2")}))
    assert file.path.read_bytes() == snapshot
    assert len(file.journal_path.read_bytes().splitlines()) == 2
    assert journaled(tmp_path).load().claims == {"u2": record("u2")}


def test_below_the_threshold_every_store_rewrites_the_snapshot(tmp_path: Path):
    file = CheckpointFile(tmp_path / "checkpoint.json", "b")
    file.store(Checkpoint("b", {"u1": record("u1")}))
    file.store(Checkpoint("b", {"u2": record("u2")}))
    assert decode_checkpoint(file.path.read_bytes()).claims == {"u2": record("u2")}
    assert not file.journal_path.exists()


def test_the_journal_is_folded_into_the_snapshot_once_it_outgrows_it(tmp_path: Path):
    file = journaled(tmp_path)
    file.store(Checkpoint("b", {}))
    for number in range(20):
        file.store(Checkpoint("b", {f"u{number}": record(f"u{number}")}))
    assert decode_checkpoint(file.path.read_bytes()).claims != {}
    assert journaled(tmp_path).load().claims == {"u19": record("u19")}


def test_a_torn_last_journal_line_is_ignored_and_the_next_store_rewrites(tmp_path: Path):
    """A crash mid-append tears at most the last line: that store never returned."""
    file = journaled(tmp_path)
    file.store(Checkpoint("b", {"u1": record("u1")}))
    file.store(Checkpoint("b", {"u1": record("u1"), "u2": record("u2")}))
    file.store(Checkpoint("b", {"u2": record("u2")}))
    lines = file.journal_path.read_bytes().splitlines(keepends=True)
    file.journal_path.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])
    reopened = journaled(tmp_path)
    loaded = reopened.load()
    assert loaded.claims == {"u1": record("u1"), "u2": record("u2")}
    reopened.store(Checkpoint("b", {"u3": record("u3")}))
    assert not reopened.journal_path.exists()
    assert journaled(tmp_path).load().claims == {"u3": record("u3")}


def test_a_corrupt_journal_line_before_the_last_is_an_error(tmp_path: Path):
    file = journaled(tmp_path)
    file.store(Checkpoint("b", {"u1": record("u1")}))
    file.store(Checkpoint("b", {"u2": record("u2")}))
    file.store(Checkpoint("b", {"u3": record("u3")}))
    raw = file.journal_path.read_bytes()
    file.journal_path.write_bytes(raw.replace(b"u2", b"u9", 1))
    with pytest.raises(CheckpointError, match="journal line 1"):
        journaled(tmp_path).load()


def test_a_journal_left_from_an_older_snapshot_is_ignored(tmp_path: Path):
    """A crash between the snapshot's rename and the journal's removal leaves a
    journal that names the previous snapshot: the new snapshot already holds it."""
    file = journaled(tmp_path)
    file.store(Checkpoint("b", {"u1": record("u1")}))
    file.store(Checkpoint("b", {"u2": record("u2")}))
    stale = file.journal_path.read_bytes()
    CheckpointFile(file.path, "b").store(Checkpoint("b", {"u3": record("u3")}))
    file.journal_path.write_bytes(stale)
    assert journaled(tmp_path).load().claims == {"u3": record("u3")}


def test_a_journal_of_another_boot_is_not_replayed(tmp_path: Path):
    journaled(tmp_path).store(Checkpoint("b", {"u1": record("u1")}))
    file = journaled(tmp_path)
    file.load()
    file.store(Checkpoint("b", {"u1": record("u1")}))
    file.store(Checkpoint("b", {"u2": record("u2")}))
    rebooted = CheckpointFile(file.path, "b2", journal_from_bytes=1)
    assert rebooted.load() == Checkpoint("b2")
    rebooted.store(Checkpoint("b2", {"u3": record("u3")}))
    assert not rebooted.journal_path.exists()
    assert CheckpointFile(file.path, "b2").load().claims == {"u3": record("u3")}
