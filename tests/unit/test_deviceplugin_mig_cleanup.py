"""Which MIG instances the legacy device plugin's reconciler destroys (`mig_cleanup`) and
the record it keeps of the instances it created (`mig_journal`): only recorded
instances of ended pods that the card still shows and no live pod names; the record
survives a restart, forgets another boot's entries, and an unreadable one destroys
nothing. Placements are NVIDIA's H100 80GB ones (3g.40gb at 0:4 and 4:4, 1g.10gb at
n:1), as the mock card serves them."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from api.hami_annotations import VGPU_MIG_ALLOCATIONS, MigAllocation, encode_mig_allocations
from dra_driver.objects.mig_profiles import Placement
from dra_driver.version import build_info
from kubeletplugin.deviceplugin.allocation import PodRef
from kubeletplugin.deviceplugin.mig_cleanup import (
    HeldSlice,
    LiveSlices,
    live_slices,
    plan_cleanup,
)
from kubeletplugin.deviceplugin.mig_journal import (
    MigJournal,
    MigJournalError,
    MigJournalRefusedError,
    MigRecord,
)
from kubeletplugin.mig_state import MigInstance, MigState

CARD = "GPU-00000000-0000-0000-0000-0000000000c1"
OTHER_CARD = "GPU-00000000-0000-0000-0000-0000000000c2"
OWNER = PodRef("default", "done")
INSTANCE = MigInstance(1, 0, "3g.40gb", Placement(4, 4), "MIG-aaaa")
RECORD = MigRecord(OWNER, "uid-done", CARD, INSTANCE)
ADMINS = MigInstance(2, 0, "3g.40gb", Placement(0, 4), "MIG-admin")
SHOWN = {CARD: MigState(True, True, True, instances=(INSTANCE, ADMINS))}


def pod(name: str, phase: str, slices: list[MigAllocation] | str) -> dict:
    value = slices if isinstance(slices, str) else encode_mig_allocations(slices)
    return {
        "metadata": {
            "namespace": "default",
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {VGPU_MIG_ALLOCATIONS: value},
        },
        "status": {"phase": phase},
    }


def test_an_ended_pods_recorded_instance_is_destroyed_and_nothing_else() -> None:
    plan = plan_cleanup([RECORD], SHOWN, {"uid-done"}, LiveSlices())
    assert plan.destroy == (RECORD,)
    assert plan.forget == plan.keep == ()


def test_a_live_owner_keeps_its_instance() -> None:
    plan = plan_cleanup([RECORD], SHOWN, set(), LiveSlices())
    assert plan.destroy == ()
    assert plan.keep == ((RECORD, "pod default/done has not ended"),)


def test_a_live_pod_naming_an_overlapping_placement_keeps_it() -> None:
    """A pod placed where the ended one was (Allocate may be reusing the instance)."""
    holder = HeldSlice("default/next", CARD, Placement(5, 1))
    elsewhere = HeldSlice("default/far", OTHER_CARD, Placement(4, 4))
    plan = plan_cleanup([RECORD], SHOWN, {"uid-done"}, LiveSlices((elsewhere, holder)))
    assert plan.destroy == ()
    assert plan.keep == ((RECORD, "pod default/next names placement 5:1"),)


def test_an_unreadable_live_annotation_destroys_nothing() -> None:
    live = live_slices([pod("odd", "Running", "{not json")])
    assert live.unreadable and live.unreadable[0].startswith("default/odd: ")
    plan = plan_cleanup([RECORD], SHOWN, {"uid-done"}, live)
    assert plan.destroy == ()
    assert "MIG allocations unreadable: default/odd" in plan.keep[0][1]


def test_an_instance_gone_or_replaced_on_its_card_is_forgotten_not_destroyed() -> None:
    replaced = MigInstance(1, 0, "3g.40gb", Placement(4, 4), "MIG-bbbb")
    gone = {CARD: MigState(True, True, True, instances=(replaced,))}
    plan = plan_cleanup([RECORD], gone, {"uid-done"}, LiveSlices())
    assert plan.forget == (RECORD,)
    assert plan.destroy == ()


def test_a_card_not_discovered_keeps_the_record() -> None:
    plan = plan_cleanup([RECORD], {}, {"uid-done"}, LiveSlices())
    assert plan.keep == ((RECORD, f"card {CARD} not discovered"),)


def test_an_empty_gpu_instance_is_still_its_own_only_after_a_failed_destroy() -> None:
    """A destroy that took the compute instance but not the GPU instance leaves an empty
    one: retried when this process saw its destroy fail; otherwise it may be anyone's."""
    empty = {
        CARD: MigState(True, True, True, empty_gpu_instances=((1, "3g.40gb", Placement(4, 4)),))
    }
    assert plan_cleanup([RECORD], empty, {"uid-done"}, LiveSlices()).forget == (RECORD,)
    retried = plan_cleanup([RECORD], empty, {"uid-done"}, LiveSlices(), {RECORD.key})
    assert retried.destroy == (RECORD,)


def test_live_slices_skip_ended_pods() -> None:
    slice_ = MigAllocation(0, 0, CARD, "1g.10gb", 2, 1)
    live = live_slices(
        [pod("run", "Running", [slice_]), pod("ok", "Succeeded", [slice_]), pod("x", "Failed", "?")]
    )
    assert live == LiveSlices((HeldSlice("default/run", CARD, Placement(2, 1)),))


@pytest.fixture
def boot_id(tmp_path: Path) -> Path:
    path = tmp_path / "boot_id"
    path.write_text("boot-1\n")
    return path


def test_the_record_survives_a_restart_and_hands_over_reused_instances(
    tmp_path: Path, boot_id: Path
) -> None:
    path = tmp_path / "state" / "mig-instances.json"
    first = MigJournal(path, boot_id)
    first.add(OWNER, "uid-done", CARD, INSTANCE)
    first.add(OWNER, "uid-done", CARD, ADMINS)
    first.forget([(CARD, 2, 0, "MIG-admin")])
    first.hand_over(PodRef("default", "next"), "uid-next", CARD, INSTANCE)
    first.hand_over(PodRef("default", "other"), "uid-other", CARD, ADMINS)
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    (record,) = MigJournal(path, boot_id).records()
    assert record == MigRecord(PodRef("default", "next"), "uid-next", CARD, INSTANCE)


def test_another_boots_record_names_nothing(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "mig-instances.json"
    MigJournal(path, boot_id).add(OWNER, "uid-done", CARD, INSTANCE)
    boot_id.write_text("boot-2\n")
    assert MigJournal(path, boot_id).records() == ()
    assert json.loads(path.read_text())["bootID"] == "boot-1"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"version": 7, "writer": "0.9.0"}', "version 7 (written by vgpu-dra-driver 0.9.0)"),
        ('{"version": 1, "bootID": "boot-1", "instan', "not JSON"),
        ('{"version": "one"}', "version 'one', expected 1"),
        ('{"version": 1, "bootID": "boot-1", "instances": [{}]}', "instances[0]: KeyError"),
    ],
    ids=["newer release", "truncated", "bad version", "bad entry"],
)
def test_a_record_that_must_not_be_used_is_refused_and_never_written_over(
    tmp_path: Path, boot_id: Path, caplog: pytest.LogCaptureFixture, content: str, reason: str
) -> None:
    path = tmp_path / "mig-instances.json"
    path.write_text(content)
    journal = MigJournal(path, boot_id)
    with caplog.at_level(logging.ERROR):
        with pytest.raises(MigJournalRefusedError, match=re.escape(f"{path}: {reason}")):
            journal.records()
        with pytest.raises(MigJournalRefusedError):
            journal.add(OWNER, "uid-done", CARD, INSTANCE)
        with pytest.raises(MigJournalRefusedError):
            journal.forget([(CARD, 1, 0, "MIG-x")])
    assert path.read_text() == content
    logged = [r for r in caplog.records if r.getMessage().startswith("MIG instance record")]
    assert len(logged) == 1  # once, not on every use
    path.unlink()
    journal.add(OWNER, "uid-done", CARD, INSTANCE)
    assert [r.pod_uid for r in journal.records()] == ["uid-done"]


def test_the_record_names_its_schema_version_and_writer(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "mig-instances.json"
    MigJournal(path, boot_id).add(OWNER, "uid-done", CARD, INSTANCE)
    written = json.loads(path.read_text())
    assert (written["version"], written["writer"]) == (1, build_info().version)


def test_a_record_that_cannot_be_reached_says_which_file(tmp_path: Path, boot_id: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    journal = MigJournal(blocker / "mig-instances.json", boot_id)
    where = re.escape(f"{blocker}/mig-instances.json: cannot read: Not a directory")
    with pytest.raises(MigJournalError, match=where):
        journal.add(OWNER, "uid-done", CARD, INSTANCE)
    with pytest.raises(MigJournalError, match=where):
        journal.records()
    assert blocker.read_text() == ""
