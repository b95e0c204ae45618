"""`dra-driver status` on cards of several families: a share not enforced by HAMi-core
says who enforces what (the `dra_vendors` table), in the text and the JSON, instead of
being "enforced" in libvgpu's sense."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from dra_driver.objects.dra_vendors import dra_vendor
from dra_driver.status.model import build_status
from dra_driver.status.render import render_data, render_text
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

DRIVER = "vgpu.hami.io"
GIB = 1 << 30


def node_slices(vendor_id: str) -> list[dict[str, Any]]:
    vendor = dra_vendor(vendor_id)
    card = GpuInfo(f"{vendor_id}-0", 0, 0, vendor.product, vendor.memory_bytes, vendor=vendor_id)
    return build_resource_slices(f"node-{vendor_id}", "uid", [card], SliceSettings(), 1)


def claim(vendor_id: str, memory: str, cores: str, configs: list[dict] | None = None) -> dict:
    return {
        "metadata": {"name": f"{vendor_id}-share", "namespace": "ns", "uid": f"{vendor_id}-uid"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "card",
                        "exactly": {"deviceClassName": dra_vendor(vendor_id).device_class},
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "card",
                            "driver": DRIVER,
                            "pool": f"node-{vendor_id}",
                            "device": "gpu-0",
                            "consumedCapacity": {"memory": memory, "cores": cores},
                        }
                    ],
                    "config": configs or [],
                },
                "allocationTimestamp": "2026-12-01T10:00:00Z",
            }
        },
    }


CLASS_OPT_OUT = {
    "source": "FromClass",
    "opaque": {
        "driver": DRIVER,
        "parameters": {
            "apiVersion": "vgpu.hami.io/v1alpha1",
            "kind": "VGPUConfig",
            "disableControl": True,
        },
    },
}


def mixed_status():
    return build_status(
        driver=DRIVER,
        slices=[s for v in ("nvidia", "mlu", "ascend", "gcu") for s in node_slices(v)],
        claims=[
            claim("nvidia", "10Gi", "20"),
            claim("mlu", "12Gi", "25", [CLASS_OPT_OUT]),
            claim("ascend", "16Gi", "0"),
            claim("gcu", "48Gi", "100"),
        ],
        pods=[],
        nodes=[],
        events=[],
        device_classes=[],
    )


def test_json_says_who_enforces_each_share_and_whether_its_limits_hold():
    data = json.loads(render_data(mixed_status(), "json"))
    marks = {
        share["holder"]: (share["enforced"], share["enforcedBy"], share["enforcementNote"])
        for gpu in data["gpus"]
        for share in gpu["shares"]
    }
    assert marks == {
        "nvidia-share": (True, "HAMi-core (libvgpu)", ""),
        # libvgpu's opt-outs are no business of a card libvgpu is not on.
        "mlu-share": (False, "accounting only", ""),
        "ascend-share": (True, "Ascend runtime (vNPU template)", ""),
        "gcu-share": (False, "whole card; accounting only", ""),
    }


def test_an_nvidia_share_opted_out_of_libvgpu_is_still_libvgpus_and_off():
    status = build_status(
        driver=DRIVER,
        slices=node_slices("nvidia"),
        claims=[claim("nvidia", "10Gi", "20", [CLASS_OPT_OUT])],
        pods=[],
        nodes=[],
        events=[],
        device_classes=[],
    )
    ((share,),) = [gpu.shares for gpu in status.gpus]
    assert (share.enforced, share.enforced_by) == (False, "HAMi-core (libvgpu)")
    assert "disableControl" in share.enforcement_note


def test_the_text_tags_each_other_vendors_share_with_who_enforces_it():
    out = io.StringIO()
    render_text(mixed_status(), Console(file=out, width=250, color_system=None))
    text = out.getvalue()
    assert "ns/mlu-share [accounting only] 12.0Gi 25%" in text
    assert "ns/ascend-share [Ascend runtime (vNPU template)] 16.0Gi 0%" in text
    assert "ns/gcu-share [whole card; accounting only] 48.0Gi 100%" in text
    assert "ns/nvidia-share 10.0Gi 20%" in text
    assert "limits off" not in text and "Enforcement opt-outs" not in text
