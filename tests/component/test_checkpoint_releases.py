"""The checkpoint between this release and 0.1.0, each run as its own code in a subprocess.

0.1.0's code is the tag `v0.1.0` of this repository (or, in a clone without the tag,
the commit its upgrade fixtures were recorded from), extracted with `git archive`
(no network). A downgrade by one release must read what this release wrote
(snapshot with its `writer`, journal, MIG records), and this release must read
what 0.1.0 wrote; each then rewrites the other's file, and the first reads it back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from release_trees import REPOSITORY, ReleaseTreeError, extract_release, release_revision

BOOT = "boot-1"

SCRIPT = r"""
import dataclasses, json, sys
from pathlib import Path
import kubeletplugin.checkpoint as checkpoint
from kubeletplugin.checkpoint import (
    Checkpoint, CheckpointFile, ClaimRecord, MigRecord, PreparedDevice, PrepareState,
)

def plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.name != "unknown"}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value

def claim(n, mig=()):
    uid = f"00000000-0000-4000-8000-{n:012d}"
    device = PreparedDevice(("gpu",), "node-a", f"gpu-{n % 2}", (f"k8s.vgpu.hami.io/claim={uid}",),
                            f"share-{n}", f"GPU-{n % 2}", (n + 1) << 28, 10 + n)
    state = PrepareState.STARTED if n == 5 else PrepareState.COMPLETED
    return uid, ClaimRecord(uid, "ns", f"claim-{n}", state, () if mig else (device,),
                            f"{n:032x}", (f"ns/pod-{n}",), mig)

mode, path, boot = sys.argv[1:4]
file = CheckpointFile(Path(path), boot, journal_from_bytes=1)
if mode == "write":
    claims = dict(claim(n) for n in range(6))
    file.store(Checkpoint(boot, dict(claims)))
    made = MigRecord("GPU-0", "1g.10gb", 0, 1, 7, 0, "MIG-00000000-0000-0000-0000-000000000007")
    intent = MigRecord("GPU-0", "2g.20gb", 2, 2)
    claims.update([claim(6, mig=(made, intent))])
    file.store(Checkpoint(boot, dict(claims)))
    del claims[claim(1)[0]]
    claims.update([claim(7)])
    file.store(Checkpoint(boot, dict(claims)))
    assert file.journal_path.exists()
elif mode == "rewrite":
    claims = file.load().claims
    del claims[claim(2)[0]]
    file.store(Checkpoint(boot, dict(claims)))
else:
    claims = file.load().claims
print(json.dumps({"module": checkpoint.__file__,
                  "claims": {uid: plain(r) for uid, r in claims.items()}}))
"""


@pytest.fixture(scope="module")
def release_0_1_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.1.0's code, extracted from the tag."""
    try:
        revision = release_revision("0.1.0")
        return extract_release(revision, tmp_path_factory.mktemp("release-0.1.0") / "tree")
    except ReleaseTreeError as error:
        pytest.skip(f"0.1.0's code is read from the repository's history: {error}")


def run(code: Path, mode: str, path: Path) -> dict[str, Any]:
    """SCRIPT's answer with `code` first on the import path; checks that it was `code`."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(path), BOOT],
        capture_output=True,
        check=False,
        cwd=path.parent,
        env={**os.environ, "PYTHONPATH": str(code)},
        text=True,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert Path(answer["module"]).is_relative_to(code)
    return answer["claims"]


def test_release_0_1_0_reads_and_rewrites_what_this_release_wrote(
    release_0_1_0: Path, tmp_path: Path
):
    path = tmp_path / "checkpoint.json"
    written = run(REPOSITORY, "write", path)
    assert json.loads(path.read_bytes())["data"]["writer"]
    assert path.with_name("checkpoint.json.journal").exists()
    assert any(record["mig"] for record in written.values())
    assert run(release_0_1_0, "read", path) == written
    rewritten = run(release_0_1_0, "rewrite", path)
    assert len(rewritten) == len(written) - 1
    assert run(REPOSITORY, "read", path) == rewritten


def test_this_release_reads_and_rewrites_what_release_0_1_0_wrote(
    release_0_1_0: Path, tmp_path: Path
):
    path = tmp_path / "checkpoint.json"
    written = run(release_0_1_0, "write", path)
    assert "writer" not in json.loads(path.read_bytes())["data"]
    assert run(REPOSITORY, "read", path) == written
    rewritten = run(REPOSITORY, "rewrite", path)
    assert len(rewritten) == len(written) - 1
    assert json.loads(path.read_bytes())["data"]["writer"]
    assert run(release_0_1_0, "read", path) == rewritten
