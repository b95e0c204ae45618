"""Flags several `dra-driver` commands share, each with its environment variable.

The CLI and the component packages that register their own subcommands
(`controller`, `controller.legacy`) import these, so a flag shared by several
commands is defined once.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dra_driver.engine.policy import BINPACK, SPREAD


def env(name: str, default: str) -> str:
    """A flag's default: its environment variable when set."""
    return os.environ.get(name, default)


def add_process_args(parser: argparse.ArgumentParser) -> None:
    """What every long-running component takes: how to reach the API, how loud to log."""
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig file (default: in-cluster service account)",
    )
    parser.add_argument("--log-level", default=env("LOG_LEVEL", "INFO"))


def add_scheduler_policy_args(parser: argparse.ArgumentParser) -> None:
    """HAMi's `--node-scheduler-policy` / `--gpu-scheduler-policy` and their defaults."""
    parser.add_argument("--node-scheduler-policy", default=env("NODE_SCHEDULER_POLICY", BINPACK))
    parser.add_argument("--gpu-scheduler-policy", default=env("GPU_SCHEDULER_POLICY", SPREAD))
