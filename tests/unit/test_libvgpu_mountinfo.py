"""Parsing mountinfo and locating a directory's users across mount namespaces."""

from __future__ import annotations

from libvgpu.mountinfo import filesystem_location, mounts_exposing, parse_mountinfo

SELF = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /proc rw,nosuid shared:12 - proc proc rw
41 22 8:1 /var/lib/vgpu /usr/local/vgpu rw,relatime - ext4 /dev/sda1 rw
42 22 8:2 /data\\040dir /mnt/with\\040space rw - xfs /dev/sda2 rw
"""


def test_parse_keeps_device_root_and_mount_point_and_unescapes():
    entries = parse_mountinfo(SELF + "garbage line\n")
    assert [(e.device, e.root, e.mount_point) for e in entries] == [
        ("8:1", "/", "/"),
        ("0:25", "/", "/proc"),
        ("8:1", "/var/lib/vgpu", "/usr/local/vgpu"),
        ("8:2", "/data dir", "/mnt/with space"),
    ]


def test_location_uses_the_deepest_mount_and_its_root():
    entries = parse_mountinfo(SELF)
    assert filesystem_location(entries, "/usr/local/vgpu/claims/x") == (
        "8:1",
        "/var/lib/vgpu/claims/x",
    )
    assert filesystem_location(entries, "/usr/local/vgpu") == ("8:1", "/var/lib/vgpu")
    assert filesystem_location(entries, "/usr/local/vgpux") == ("8:1", "/usr/local/vgpux")
    assert filesystem_location(entries, "/mnt/with space/a") == ("8:2", "/data dir/a")


def test_exposing_mounts_are_the_dir_or_below_never_a_parent():
    container = parse_mountinfo(
        "100 90 8:1 /var/lib/vgpu/claims/x /usr/local/vgpu/claims/x rw - ext4 /dev/sda1 rw\n"
        "101 90 8:1 /var/lib/vgpu/claims/x/f.cache /f rw - ext4 /dev/sda1 rw\n"
        "102 90 8:1 /var/lib/vgpu /usr/local/vgpu rw - ext4 /dev/sda1 rw\n"
        "103 90 8:9 /var/lib/vgpu/claims/x /other rw - ext4 /dev/sdb rw\n"
        "104 90 8:1 /var/lib/vgpu/claims/xy /xy rw - ext4 /dev/sda1 rw\n"
    )
    exposing = mounts_exposing(container, "8:1", "/var/lib/vgpu/claims/x")
    assert [entry.mount_point for entry in exposing] == ["/usr/local/vgpu/claims/x", "/f"]
