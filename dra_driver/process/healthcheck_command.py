"""`dra-driver healthcheck`: the liveness probe's flags and exit status.

Owns the subcommand's parser and handler; the probe itself is
`dra_driver.process.healthcheck`, imported by the handler so that `--help`
does not load gRPC. May import `dra_driver.cli` (the registration contract).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from dra_driver.cli.registration import Subcommands


def register(commands: Subcommands) -> None:
    healthcheck = commands.add_parser(
        "healthcheck",
        help="liveness probe: ask grpc.health.v1 over a component's own unix sockets",
        description="Exit 0 when every socket answers SERVING; else print why and exit 1.",
    )
    healthcheck.add_argument(
        "--socket",
        type=Path,
        action="append",
        required=True,
        env="HEALTHCHECK_SOCKETS",
        help="a component's gRPC unix socket (repeatable)",
    )
    healthcheck.add_argument(
        "--timeout", type=float, env="HEALTHCHECK_TIMEOUT", default=3.0, help="seconds per socket"
    )
    healthcheck.set_defaults(handler=_healthcheck)


def _healthcheck(args: argparse.Namespace) -> int:
    from dra_driver.process.healthcheck import check_sockets

    problems = asyncio.run(check_sockets(args.socket, args.timeout))
    for problem in problems:
        print(f"dra-driver healthcheck: {problem}", file=sys.stderr)
    return 1 if problems else 0
