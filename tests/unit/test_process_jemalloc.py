"""The controller as deployed runs on jemalloc (`JEMALLOC_ENV`, preloaded): memory a
burst freed goes back by the page, however scattered the objects that outlive it,
and the process's memory figures come from jemalloc. Each case runs in a fresh
interpreter started with that environment, as the Deployment starts the controller."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_driver.process.allocator import JEMALLOC_ENV, JEMALLOC_LIBRARY, jemalloc_env

ROOT = Path(__file__).resolve().parents[2]

SCATTERED_SURVIVORS = """
import json, sys
from dra_driver.process.allocator import release_free_memory

def resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

start = resident_mib()
burst = [b"%0100d" % n for n in range(400_000)]
peak = resident_mib()
survivors = burst[::500]
del burst
release_free_memory()
print(json.dumps({"burst_mib": peak - start, "kept_mib": resident_mib() - start}))
"""


def run_probe(probe: str, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return json.loads(done.stdout.splitlines()[-1])


def jemalloc_or_skip() -> str:
    library = ctypes.util.find_library("jemalloc")
    if library is None:
        pytest.skip("jemalloc is not installed (Debian/Ubuntu: apt-get install libjemalloc2)")
    return library


def test_a_bursts_scattered_survivors_keep_little_resident_on_jemalloc() -> None:
    """400,000 small objects, one in 500 kept: on Python's allocator each survivor keeps
    its 1 MiB arena resident; on jemalloc only its page."""
    on_jemalloc = run_probe(SCATTERED_SURVIVORS, jemalloc_env(jemalloc_or_skip()))
    on_pymalloc = run_probe(SCATTERED_SURVIVORS, {"PYTHONMALLOC": "pymalloc"})
    for figures in (on_jemalloc, on_pymalloc):
        assert figures["burst_mib"] > 40
    assert on_pymalloc["kept_mib"] > 0.8 * on_pymalloc["burst_mib"]
    assert on_jemalloc["kept_mib"] < 0.5 * on_jemalloc["burst_mib"]


RELEASE = """
import json
from dra_driver.process.allocator import release_free_memory

def resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

burst = [b"%04000d" % n for n in range(16_384)]
del burst
before = resident_mib()
released = release_free_memory()
print(json.dumps({"released": released, "returned_mib": before - resident_mib()}))
"""


def test_release_purges_the_free_pages_at_once() -> None:
    """With decay off, freed pages stay resident until the release purges them."""
    env = {**jemalloc_env(jemalloc_or_skip()), "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:0"}
    figures = run_probe(RELEASE, env)
    assert figures["released"] is True
    assert float(str(figures["returned_mib"])) > 32


FIGURES = """
import json
from dra_driver.process.allocator import (
    allocator_in_use, fix_mmap_threshold, live_memory, python_objects_on_pymalloc)

before = live_memory().c_heap_bytes
held = [object() for _ in range(200_000)]
during = live_memory().c_heap_bytes
del held
after = live_memory().c_heap_bytes
print(json.dumps({
    "allocator": allocator_in_use(),
    "on_pymalloc": python_objects_on_pymalloc(),
    "blocks": live_memory().python_blocks,
    "held": during - before,
    "after": after - before,
    "mmap_threshold_set": fix_mmap_threshold(),
}))
"""


def test_figures_come_from_jemalloc() -> None:
    """Python's objects are jemalloc's there: its allocated bytes count them, and the
    glibc tuning is left alone."""
    figures = run_probe(FIGURES, jemalloc_env(jemalloc_or_skip()))
    assert str(figures["allocator"]).startswith("jemalloc 5.")
    assert figures["on_pymalloc"] is False
    assert figures["blocks"] == 0
    held, after = int(str(figures["held"])), int(str(figures["after"]))
    assert held >= 200_000 * 16
    assert after < held // 2
    assert figures["mmap_threshold_set"] is False


def test_glibc_serving_pythons_objects_is_warned_about() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logging; logging.basicConfig();"
            "from dra_driver.process.allocator import warn_if_objects_on_glibc;"
            "warn_if_objects_on_glibc()",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONMALLOC": "malloc"},
    )
    assert "preload jemalloc" in done.stderr


def test_the_deployment_runs_the_controller_on_the_jemalloc_the_image_ships() -> None:
    deployment = next(
        doc
        for doc in yaml.safe_load_all(
            (ROOT / "deploy/components/controller/deployment.yaml").read_text()
        )
        if doc and doc["kind"] == "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert {name: env.get(name) for name in (*JEMALLOC_ENV, "LD_PRELOAD")} == jemalloc_env(
        JEMALLOC_LIBRARY
    )
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    assert "libjemalloc2" in dockerfile
    assert f" {JEMALLOC_LIBRARY}\n" in dockerfile
