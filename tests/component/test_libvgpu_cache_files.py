"""Known cache files read on every scrape: one bad file costs only itself, and is logged once."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from test_libvgpu_region_writer import Proc, Region, region_bytes, write_region

from libvgpu.cache_files import CacheFiles
from libvgpu.cache_paths import CacheFileKey, CacheOwnerKind

GOOD_UID = "0b7e3c52-1111-4a2b-9c3d-000000000001"
BAD_UID = "0b7e3c52-2222-4a2b-9c3d-000000000002"
GPU = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
SCRAPES = 3


def region(magic: int | None = None) -> Region:
    value = Region(uuids=[GPU], limits=[1 << 30], procs=[Proc(pid=1, used={0: (0, 0, 5, 5)})])
    if magic is not None:
        value.magic = magic
    return value


@pytest.fixture
def files(tmp_path: Path):
    known = CacheFiles()
    good = tmp_path / "good.cache"
    write_region(good, region())
    known.add(str(good), CacheFileKey(CacheOwnerKind.CLAIM, GOOD_UID))
    yield known
    known.close()


def problems(caplog, path: Path) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.reason)
        for record in caplog.records
        if getattr(record, "path", None) == str(path) and hasattr(record, "reason")
    ]


def scrape(files: CacheFiles) -> list[str]:
    return [reading.key.uid for reading in files.read_all()]


def test_a_bad_file_is_logged_once_per_change_and_never_hides_the_others(files, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="libvgpu.cache_files")
    bad = tmp_path / "bad.cache"
    write_region(bad, region(magic=12345))
    files.add(str(bad), CacheFileKey(CacheOwnerKind.CLAIM, BAD_UID))

    assert [scrape(files) for _ in range(SCRAPES)] == [[GOOD_UID]] * SCRAPES
    assert problems(caplog, bad) == [(logging.WARNING, "bad magic 12345, want 19920718")]

    bad.write_bytes(bytes(region_bytes(region()))[:5000])
    assert [scrape(files) for _ in range(SCRAPES)] == [[GOOD_UID]] * SCRAPES
    assert problems(caplog, bad)[1:] == [
        (logging.WARNING, "size 5000 matches no known region layout")
    ]

    write_region(bad, region())
    assert scrape(files) == [GOOD_UID, BAD_UID]
    recovered = [record for record in caplog.records if record.getMessage().endswith("again")]
    assert [(record.levelno, record.path) for record in recovered] == [(logging.INFO, str(bad))]


def test_a_file_being_created_is_info_not_a_warning(files, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="libvgpu.cache_files")
    creating = tmp_path / "creating.cache"
    write_region(creating, region(magic=0))
    files.add(str(creating), CacheFileKey(CacheOwnerKind.CLAIM, BAD_UID))

    for _ in range(SCRAPES):
        assert scrape(files) == [GOOD_UID]

    assert problems(caplog, creating) == [(logging.INFO, "magic not set (not yet initialised)")]


def test_an_unreadable_path_is_a_warning_naming_the_reason(files, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="libvgpu.cache_files")
    link = tmp_path / "link.cache"
    os.symlink(tmp_path / "good.cache", link)
    directory = tmp_path / "dir.cache"
    directory.mkdir()
    for path in (link, directory):
        files.add(str(path), CacheFileKey(CacheOwnerKind.CLAIM, BAD_UID))

    for _ in range(SCRAPES):
        assert scrape(files) == [GOOD_UID]

    assert problems(caplog, link) == [(logging.WARNING, os.strerror(errno.ELOOP))]
    assert problems(caplog, directory) == [(logging.WARNING, "not a regular file")]


def test_a_forgotten_file_is_logged_again_when_known_again(files, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="libvgpu.cache_files")
    bad = tmp_path / "bad.cache"
    write_region(bad, region(magic=7))
    key = CacheFileKey(CacheOwnerKind.CLAIM, BAD_UID)
    files.add(str(bad), key)
    scrape(files)
    files.discard(str(bad))
    files.add(str(bad), key)

    scrape(files)

    assert [level for level, _ in problems(caplog, bad)] == [logging.WARNING, logging.WARNING]
