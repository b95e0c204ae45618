"""`dra-driver scheduler` as a process, and its flag and config errors."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from controller.legacy.command import settings_from_args
from dra_driver.cli import EXIT_BAD_INPUT, build_parser, main
from simulator.apiserver import APIServer

READY_LINE = "legacy scheduler serving"
WAIT_S = 60.0


def test_bad_device_config_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  defaultGPUNum: -1\n")
    code = main(["scheduler", "--device-config-file", str(config), "--kubeconfig", "/absent"])
    assert code == EXIT_BAD_INPUT
    assert "nvidia.defaultGPUNum" in capsys.readouterr().err


def test_bad_policy_and_tls_flags_are_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["extender", "--node-scheduler-policy", "pack", "--kubeconfig", "/x"]) == 2
    assert "nodePolicy" in capsys.readouterr().err
    assert main(["webhook", "--tls-cert", "/x.crt", "--kubeconfig", "/x"]) == 2
    assert "give both or neither" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_scheduler_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        port = free_port()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "dra_driver.cli",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--kubeconfig",
            str(kubeconfig),
            "--no-authenticate-callers",
            stderr=asyncio.subprocess.PIPE,
        )
        try:

            async def ready() -> None:
                assert process.stderr is not None
                while True:
                    line = (await process.stderr.readline()).decode()
                    assert line, "the scheduler exited before serving"
                    if READY_LINE in line:
                        return

            await asyncio.wait_for(ready(), WAIT_S)
            async with aiohttp.ClientSession() as session:
                for path in ("/healthz", "/readyz"):
                    async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                        assert response.status == 200
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), WAIT_S) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


def test_authentication_without_allowed_callers_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Caller authentication is on by default; with nobody allowed every call would be
    refused, so the process does not start."""
    assert main(["scheduler", "--kubeconfig", "/x"]) == 2
    assert "--allowed-callers: empty" in capsys.readouterr().err


def test_enforcement_opt_out_namespaces_come_from_the_flag() -> None:
    """Turning HAMi-core's enforcement off is the administrator's: only the namespaces the
    flag names may set CUDA_DISABLE_CONTROL themselves."""
    args = build_parser().parse_args(
        [
            "webhook",
            "--no-authenticate-callers",
            "--enforcement-opt-out-namespaces",
            " trusted, , lab ",
            "--kubeconfig",
            "/x",
        ]
    )
    settings, serve = settings_from_args(args)
    assert settings.enforcement_opt_out_namespaces == frozenset({"trusted", "lab"})
    assert (serve.extender, serve.webhook) == (False, True)
    default = settings_from_args(build_parser().parse_args(["webhook", "--allowed-callers", "a"]))
    assert default[0].enforcement_opt_out_namespaces == frozenset()
