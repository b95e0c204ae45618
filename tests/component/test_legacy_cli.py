"""`dra-driver scheduler` as a process, and its flag and config errors."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from controller.legacy.command import settings_from_args
from dra_driver.cli import EXIT_BAD_INPUT, build_parser, main
from dra_driver.tls.bundle import issue_serving_and_client
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
    default = settings_from_args(
        build_parser().parse_args(["webhook", "--allowed-webhook-callers", "a"])
    )
    assert default[0].enforcement_opt_out_namespaces == frozenset()


def _parse(*argv: str):
    return settings_from_args(build_parser().parse_args([*argv, "--kubeconfig", "/x"]))


def test_webhook_callers_are_a_list_of_their_own_or_the_webhook_is_opened(
    capsys: pytest.CaptureFixture,
) -> None:
    """The extender's callers never get /webhook by being listed for /filter and /bind:
    the webhook needs its own list or the explicit switch, else the process does not start."""
    assert (
        main(["scheduler", "--allowed-callers", "vgpu-kube-scheduler", "--kubeconfig", "/x"]) == 2
    )
    assert "--allowed-webhook-callers: empty" in capsys.readouterr().err
    settings, _ = _parse("scheduler", "--allowed-callers", "vgpu-kube-scheduler", "--open-webhook")
    auth = settings.caller_auth
    assert (auth.enabled, auth.open_webhook) == (True, True)
    assert auth.allowed_callers == frozenset({"vgpu-kube-scheduler"})
    settings, _ = _parse(
        "scheduler", "--allowed-callers", "s", "--allowed-webhook-callers", "kube-apiserver, a"
    )
    assert settings.caller_auth.allowed_webhook_callers == frozenset({"kube-apiserver", "a"})
    assert settings.caller_auth.open_webhook is False
    # An extender alone needs no webhook callers.
    assert _parse("extender", "--allowed-callers", "s")[0].caller_auth.allowed_callers == {"s"}


def test_client_ca_file_is_repeatable_and_each_is_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    now, hour = datetime.now(UTC), timedelta(hours=1)
    serving, _ = issue_serving_and_client(("127.0.0.1",), "vgpu-kube-scheduler", now, hour)
    cluster, _ = issue_serving_and_client(("cluster.invalid",), "kube-apiserver", now, hour)
    for name, data in (
        ("tls.crt", serving.cert),
        ("tls.key", serving.key),
        ("ca.crt", serving.ca_cert),
        ("cluster-ca.crt", cluster.ca_cert),
    ):
        (tmp_path / name).write_bytes(data)
    tls = ["--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key")]
    cas = ["--client-ca-file", str(tmp_path / "ca.crt")]
    cas += ["--client-ca-file", str(tmp_path / "cluster-ca.crt")]
    _, serve = _parse("extender", "--allowed-callers", "s", *tls, *cas)
    assert serve.client_cas == (tmp_path / "ca.crt", tmp_path / "cluster-ca.crt")
    missing = ["--client-ca-file", str(tmp_path / "absent.crt")]
    argv = ["extender", "--allowed-callers", "s", *tls, *cas, *missing, "--kubeconfig", "/x"]
    assert main(argv) == 2
    assert f"--client-ca-file: cannot load {tmp_path / 'absent.crt'}" in capsys.readouterr().err
