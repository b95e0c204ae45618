"""The monitor, in its own process, keeps answering while region files are truncated under it.

A writer process shrinks and rewrites every cache file in place, round after
round, while the test scrapes over HTTP. Touching a mapped page past a file's
new end raises SIGBUS, which would kill the monitor; a mapping longer than the
file fails to open. Neither may cost more than that file's series.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from test_libvgpu_region_writer import Proc, Region, region_bytes

GIB = 1 << 30
FILES = 6
SCRAPES = 120
HANG_GUARD_S = 120
HERE = Path(__file__).parent
GPU_UUID = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def churned_region() -> bytes:
    procs = [
        Proc(pid=10 + slot, hostpid=100 + slot, used={0: (0, 0, GIB, GIB)}, sm_util={0: 5})
        for slot in range(3)
    ]
    return bytes(region_bytes(Region(uuids=[GPU_UUID], limits=[8 * GIB], procs=procs)))


async def start(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def stop(process: asyncio.subprocess.Process) -> bytes:
    """Close its stdin (its signal to finish) and collect what it printed."""
    process.stdin.close()
    output = await process.stdout.read()
    await process.wait()
    return output


def used_by_pod(text: str) -> dict[str, float]:
    families = {family.name: family for family in text_string_to_metric_families(text)}
    return {
        sample.labels["pod"]: sample.value
        for sample in families["hami_vgpu_memory_used_bytes"].samples
    }


async def test_scrapes_answer_while_files_are_truncated_and_rewritten(tmp_path: Path):
    content = churned_region()
    claim_uids = [str(uuid.uuid4()) for _ in range(FILES)]
    paths = []
    for claim_uid in claim_uids:
        directory = tmp_path / "claims" / claim_uid
        directory.mkdir(parents=True)
        path = directory / (uuid.uuid4().hex + ".cache")
        path.write_bytes(content)
        paths.append(str(path))
    monitor = await start(str(HERE / "monitor_child.py"), str(tmp_path), *claim_uids)
    writer = None
    try:
        async with asyncio.timeout(HANG_GUARD_S), aiohttp.ClientSession() as session:
            port = int(await monitor.stdout.readline())
            url = f"http://127.0.0.1:{port}/metrics"
            async with session.get(url) as response:
                assert used_by_pod(await response.text()) == {
                    f"pod-{index}": 3 * GIB for index in range(FILES)
                }
            script = (
                "import json, sys; sys.path.insert(0, sys.argv[1]);"
                "from test_libvgpu_region_writer import churn_until_stdin_closes;"
                "churn_until_stdin_closes(json.loads(sys.argv[2]), open(sys.argv[3], 'rb').read())"
            )
            (tmp_path / "content.bin").write_bytes(content)
            writer = await start(
                "-c", script, str(HERE), json.dumps(paths), str(tmp_path / "content.bin")
            )
            assert await writer.stdout.readline() == b"ready\n"
            statuses = []
            for _ in range(SCRAPES):
                try:
                    async with session.get(url) as response:
                        statuses.append(response.status)
                        text = await response.text()
                except aiohttp.ClientError as error:
                    statuses.append(f"no answer: {error}")
                    break
                if response.status == 200:
                    assert set(used_by_pod(text)) <= {f"pod-{index}" for index in range(FILES)}
            rounds = int(await stop(writer))
            writer = None

            assert statuses == [200] * SCRAPES
            assert rounds > 0
            assert monitor.returncode is None
            async with session.get(url) as response:
                assert used_by_pod(await response.text()) == {
                    f"pod-{index}": 3 * GIB for index in range(FILES)
                }
    finally:
        for process in (writer, monitor):
            if process is not None and process.returncode is None:
                await stop(process)
