"""The checkpoint across releases and bad input: every case gives a typed error naming the
file, or a safe recovery; never a silent reset.

Each half-migrated state is built as the exact files a kill would leave (the files
of the steps before the kill, nothing of the ones after), then loaded."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointEncoder,
    CheckpointFile,
    CheckpointTooNewError,
    ClaimRecord,
    MigRecord,
    PreparedDevice,
    PrepareState,
    decode_checkpoint,
    encode_checkpoint,
)
from kubeletplugin.checkpoint_journal import journal_line
from kubeletplugin.checkpoint_schema import this_release

BOOT = "boot-1"


def device(name: str = "gpu-0") -> PreparedDevice:
    return PreparedDevice(("gpu",), "node-a", name, (f"k8s.vgpu.hami.io/claim=x-{name}",))


def record(uid: str) -> ClaimRecord:
    return ClaimRecord(uid, "ns", f"claim-{uid}", PrepareState.COMPLETED, (device(),))


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def envelope(body: dict[str, Any]) -> bytes:
    """A checkpoint file around `body`, with its right checksum."""
    data = canonical(body)
    return b'{"checksum":"' + hashlib.sha256(data).hexdigest().encode() + b'","data":' + data + b"}"


def body_of(raw: bytes) -> dict[str, Any]:
    return json.loads(raw)["data"]


def release_0_1_0(checkpoint: Checkpoint) -> bytes:
    """The bytes 0.1.0 writes for `checkpoint`: the same body without `writer`."""
    body = body_of(encode_checkpoint(checkpoint))
    del body["writer"]
    return envelope(body)


def checksum_of(raw: bytes) -> str:
    return json.loads(raw)["checksum"]


def put(uid: str, claim: ClaimRecord) -> bytes:
    """A journal line's `"<uid>":{record}` member, as the encoder makes it."""
    return CheckpointEncoder().members(Checkpoint(BOOT, {uid: claim}))[uid][1]


def test_what_this_release_writes_names_it_and_keeps_schema_version_1(tmp_path: Path):
    file = CheckpointFile(tmp_path / "checkpoint.json", BOOT)
    file.store(Checkpoint(BOOT, {"u1": record("u1")}))
    body = body_of(file.path.read_bytes())
    assert (body["version"], body["writer"]) == (1, this_release())


def test_a_file_of_0_1_0_reads_and_the_first_store_stamps_it(tmp_path: Path):
    path = tmp_path / "checkpoint.json"
    path.write_bytes(release_0_1_0(Checkpoint(BOOT, {"u1": record("u1")})))
    file = CheckpointFile(path, BOOT)
    assert file.load() == Checkpoint(BOOT, {"u1": record("u1")})
    file.store(Checkpoint(BOOT, {"u1": record("u1")}))
    assert body_of(path.read_bytes())["writer"] == this_release()


UNKNOWN_BODY = {"nodeHints": {"a": [1, 2]}, "zz": None}
UNKNOWN_RECORD = {"leaseHolder": "x", "aa": 1.5}
UNKNOWN_DEVICE = {"futureLimit": 7}
UNKNOWN_MIG = {"futureMode": "strict"}


def newer_release_body() -> dict[str, Any]:
    """A body a later release could write at schema version 1: keys this one does not
    know at every level (those in device and MIG entries need 0.1.0 out of the window)."""
    claim = ClaimRecord(
        "u1",
        "ns",
        "claim",
        PrepareState.COMPLETED,
        (device(),),
        mig=(MigRecord("GPU-a", "1g.10gb", 0, 1, 7, 0, "MIG-a"),),
    )
    body = body_of(encode_checkpoint(Checkpoint(BOOT, {"u1": claim, "u2": record("u2")})))
    body.update(UNKNOWN_BODY, writer="9.9.9")
    body["claims"]["u1"].update(UNKNOWN_RECORD)
    body["claims"]["u1"]["devices"][0].update(UNKNOWN_DEVICE)
    body["claims"]["u1"]["mig"][0].update(UNKNOWN_MIG)
    return body


def test_unknown_keys_at_every_level_are_read_and_written_back(tmp_path: Path):
    path = tmp_path / "checkpoint.json"
    path.write_bytes(envelope(newer_release_body()))
    file = CheckpointFile(path, BOOT)
    loaded = file.load()
    assert loaded.claims["u1"].devices[0].device_name == "gpu-0"
    file.store(loaded)
    written = body_of(path.read_bytes())
    expected = newer_release_body()
    expected["writer"] = this_release()
    assert written == expected


def test_unknown_keys_survive_a_journaled_change_of_another_claim(tmp_path: Path):
    path = tmp_path / "checkpoint.json"
    path.write_bytes(envelope(newer_release_body()))
    file = CheckpointFile(path, BOOT, journal_from_bytes=1)
    loaded = file.load()
    file.store(loaded)
    loaded.claims.pop("u2")
    file.store(loaded)
    assert file.journal_path.exists()
    again = CheckpointFile(path, BOOT).load()
    assert again.claims["u1"].unknown == UNKNOWN_RECORD
    assert again.claims["u1"].devices[0].unknown == UNKNOWN_DEVICE
    assert again.claims["u1"].mig[0].unknown == UNKNOWN_MIG
    assert again.unknown == UNKNOWN_BODY


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
unknowns = st.dictionaries(st.text(max_size=6).map(lambda key: "x" + key), json_values, max_size=3)
devices = st.builds(
    PreparedDevice,
    request_names=st.lists(st.text(max_size=4), max_size=2).map(tuple),
    pool_name=st.text(max_size=4),
    device_name=st.text(max_size=4),
    cdi_device_ids=st.lists(st.text(max_size=4), max_size=2).map(tuple),
    unknown=unknowns,
)
records = st.builds(
    ClaimRecord,
    uid=st.text(max_size=4),
    namespace=st.text(max_size=4),
    name=st.text(max_size=4),
    state=st.sampled_from(PrepareState),
    devices=st.lists(devices, max_size=2).map(tuple),
    unknown=unknowns,
)
bodies = st.dictionaries(
    st.text(max_size=8).filter(lambda key: key not in {"version", "bootID", "claims", "writer"}),
    json_values,
    max_size=3,
)


@given(bodies, st.lists(st.dictionaries(st.text(max_size=4), records, max_size=3), min_size=1))
def test_the_incremental_encoder_matches_encode_checkpoint_with_unknown_keys(unknown, states):
    encoder = CheckpointEncoder()
    for claims in states:
        checkpoint = Checkpoint("b", claims, unknown)
        assert encoder.encode(checkpoint) == encode_checkpoint(checkpoint)
        assert decode_checkpoint(encode_checkpoint(checkpoint)) == checkpoint


def stored(tmp_path: Path, **kwargs: Any) -> CheckpointFile:
    file = CheckpointFile(tmp_path / "checkpoint.json", BOOT, **kwargs)
    file.store(Checkpoint(BOOT, {"u1": record("u1"), "u2": record("u2")}))
    return file


def refused(file: CheckpointFile, error: type[Exception]) -> str:
    """Load must raise `error` and leave every file of the directory as it was."""
    return str(refusal(file, error))


def refusal(file: CheckpointFile, error: type[Exception]) -> Exception:
    before = {p.name: p.read_bytes() for p in file.path.parent.iterdir()}
    with pytest.raises(error) as raised:
        CheckpointFile(file.path, BOOT, legacy_path=file.legacy_path).load()
    assert {p.name: p.read_bytes() for p in file.path.parent.iterdir()} == before
    return raised.value


def test_a_truncated_snapshot_is_refused_naming_the_file(tmp_path: Path):
    file = stored(tmp_path)
    raw = file.path.read_bytes()
    file.path.write_bytes(raw[: len(raw) // 2])
    message = refused(file, CheckpointCorruptError)
    assert str(file.path) in message and "truncated" in message


def test_an_empty_snapshot_is_refused(tmp_path: Path):
    file = stored(tmp_path)
    file.path.write_bytes(b"")
    assert "empty" in refused(file, CheckpointCorruptError)


def test_a_bad_checksum_is_refused_naming_the_file(tmp_path: Path):
    file = stored(tmp_path)
    file.path.write_bytes(file.path.read_bytes().replace(b"gpu-0", b"gpu-1"))
    message = refused(file, CheckpointCorruptError)
    assert str(file.path) in message and "checksum mismatch" in message


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda body: body.pop("bootID"), "bootID"),
        (lambda body: body["claims"]["u1"].pop("devices"), "claim u1: key 'devices' missing"),
        (lambda body: body["claims"]["u1"]["devices"][0].pop("pool_name"), "claim u1"),
        (lambda body: body["claims"]["u2"].update(state="Prepared"), "claim u2"),
        (lambda body: body.update(version="1"), "not an integer"),
        (lambda body: body.update(version=0), "no release wrote"),
    ],
)
def test_a_checkpoint_missing_a_key_is_refused_naming_what(tmp_path: Path, mutate, named: str):
    file = stored(tmp_path)
    body = body_of(file.path.read_bytes())
    mutate(body)
    file.path.write_bytes(envelope(body))
    message = refused(file, CheckpointCorruptError)
    assert str(file.path) in message and named in message


def test_a_future_version_is_refused_naming_file_versions_and_writer(tmp_path: Path):
    file = stored(tmp_path, journal_from_bytes=1)
    file.store(Checkpoint(BOOT, {"u1": record("u1")}))
    body = body_of(file.path.read_bytes())
    body.update(version=2, writer="0.7.1")
    body["claims"]["u1"]["devices"][0]["newKey"] = 1
    file.path.write_bytes(envelope(body))
    error = refusal(file, CheckpointTooNewError)
    assert (error.path, error.version, error.writer) == (str(file.path), 2, "0.7.1")
    message = str(error)
    assert str(file.path) in message
    assert "schema version 2" in message and "release 0.7.1" in message
    assert "reads schema version 1" in message and this_release() in message
    assert "rolled forward to 0.7.1" in message and "docs/upgrading.md" in message


def test_a_future_version_is_refused_whatever_its_checksum_says(tmp_path: Path):
    """A newer release may checksum differently: its version decides what to say."""
    file = stored(tmp_path)
    body = body_of(file.path.read_bytes())
    body["version"] = 3
    del body["writer"]
    file.path.write_bytes(json.dumps({"checksum": "sha512:abc", "data": body}).encode())
    message = refused(file, CheckpointTooNewError)
    assert "schema version 3, written by a newer release" in message


def test_a_torn_last_journal_line_is_dropped_as_the_store_that_never_returned(tmp_path: Path):
    file = stored(tmp_path, journal_from_bytes=1)
    file.store(Checkpoint(BOOT, {"u1": record("u1")}))
    file.store(Checkpoint(BOOT, {}))
    lines = file.journal_path.read_bytes().splitlines(keepends=True)
    file.journal_path.write_bytes(lines[0] + lines[1][:-7])
    assert CheckpointFile(file.path, BOOT).load().claims == {"u1": record("u1")}


def test_a_corrupt_journal_line_in_the_middle_is_refused_naming_the_journal(tmp_path: Path):
    file = stored(tmp_path, journal_from_bytes=1)
    for claims in ({"u1": record("u1")}, {}, {"u3": record("u3")}):
        file.store(Checkpoint(BOOT, claims))
    lines = file.journal_path.read_bytes().splitlines(keepends=True)
    file.journal_path.write_bytes(lines[0] + lines[1].replace(b"u1", b"u7") + lines[2])
    message = refused(file, CheckpointCorruptError)
    assert str(file.journal_path) in message and "line 2 of 3" in message


def test_a_journal_line_whose_record_does_not_read_is_refused(tmp_path: Path):
    file = stored(tmp_path)
    base = checksum_of(file.path.read_bytes())
    bad = b'"u9":{"uid":"u9"}'
    file.journal_path.write_bytes(journal_line(base, [bad], []) + journal_line(base, [], ["u9"]))
    message = refused(file, CheckpointCorruptError)
    assert str(file.journal_path) in message and "claim u9" in message


# Half-migrated: the first store of a new release rewrites 0.1.0's snapshot (with its
# journal folded in) through a temp file and a rename, then removes the journal.


def release_0_1_0_with_journal(tmp_path: Path) -> tuple[Path, dict[str, ClaimRecord]]:
    """0.1.0's files: a snapshot of u1 and u2, a journal deleting u1 and adding u3."""
    path = tmp_path / "checkpoint.json"
    snapshot = release_0_1_0(Checkpoint(BOOT, {"u1": record("u1"), "u2": record("u2")}))
    path.write_bytes(snapshot)
    base = checksum_of(snapshot)
    journal = journal_line(base, [], ["u1"]) + journal_line(base, [put("u3", record("u3"))], [])
    path.with_name("checkpoint.json.journal").write_bytes(journal)
    return path, {"u2": record("u2"), "u3": record("u3")}


def test_killed_before_the_rename_the_old_snapshot_and_journal_read_and_the_temp_goes(
    tmp_path: Path,
):
    path, claims = release_0_1_0_with_journal(tmp_path)
    rewritten = encode_checkpoint(Checkpoint(BOOT, claims))
    temp = tmp_path / ".checkpoint.json.k3x_9a0q"
    temp.write_bytes(rewritten[: len(rewritten) // 3])
    assert CheckpointFile(path, BOOT).load().claims == claims
    assert not temp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.json",
        "checkpoint.json.journal",
    ]


def test_killed_after_the_rename_the_stale_journal_is_ignored(tmp_path: Path):
    path, claims = release_0_1_0_with_journal(tmp_path)
    path.write_bytes(encode_checkpoint(Checkpoint(BOOT, claims)))
    file = CheckpointFile(path, BOOT, journal_from_bytes=1)
    assert file.load().claims == claims
    file.store(Checkpoint(BOOT, {"u3": record("u3")}))
    assert not file.journal_path.exists()
    assert CheckpointFile(path, BOOT).load().claims == {"u3": record("u3")}


def test_a_checkpoint_at_both_locations_uses_the_new_one_and_leaves_the_old(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """A kill cannot leave both (the move is one rename), but a copy back by hand can:
    the old file must never overwrite the new one."""
    legacy = tmp_path / "checkpoint.json"
    legacy.write_bytes(release_0_1_0(Checkpoint(BOOT, {"old": record("old")})))
    new = tmp_path / "state" / "checkpoint.json"
    new.parent.mkdir()
    CheckpointFile(new, BOOT).store(Checkpoint(BOOT, {"u1": record("u1")}))
    with caplog.at_level(logging.WARNING, logger="kubeletplugin.checkpoint"):
        assert CheckpointFile(new, BOOT, legacy_path=legacy).load().claims == {"u1": record("u1")}
    assert legacy.read_bytes() == release_0_1_0(Checkpoint(BOOT, {"old": record("old")}))
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.legacy_path == str(legacy)


def test_killed_before_the_legacy_move_the_next_start_moves_it(tmp_path: Path):
    legacy = tmp_path / "checkpoint.json"
    legacy.write_bytes(release_0_1_0(Checkpoint(BOOT, {"u1": record("u1")})))
    (tmp_path / "state").mkdir()
    file = CheckpointFile(tmp_path / "state" / "checkpoint.json", BOOT, legacy_path=legacy)
    assert file.load().claims == {"u1": record("u1")}
    assert not legacy.exists()


def test_a_refused_legacy_file_is_moved_but_never_changed(tmp_path: Path):
    legacy = tmp_path / "checkpoint.json"
    body = body_of(release_0_1_0(Checkpoint(BOOT, {"u1": record("u1")})))
    body["version"] = 2
    legacy.write_bytes(envelope(body))
    file = CheckpointFile(tmp_path / "state" / "checkpoint.json", BOOT, legacy_path=legacy)
    with pytest.raises(CheckpointTooNewError, match=str(file.path)):
        file.load()
    assert file.path.read_bytes() == envelope(body)


def test_a_refused_checkpoint_keeps_its_temp_files(tmp_path: Path):
    file = stored(tmp_path)
    file.path.write_bytes(b"{")
    temp = tmp_path / ".checkpoint.json.abcd1234"
    temp.write_bytes(b"partial")
    refused(file, CheckpointCorruptError)
    assert temp.read_bytes() == b"partial"


def test_other_files_beside_the_checkpoint_are_not_taken_for_temp_files(tmp_path: Path):
    file = stored(tmp_path)
    kept = [".checkpoint.json.journal", ".checkpoint.json.abc", "checkpoint.json.abcd1234"]
    for name in kept:
        (tmp_path / name).write_bytes(b"x")
    file.load()
    assert all((tmp_path / name).exists() for name in kept)
