"""The `dra-driver controller` subcommand: flags (each with an env var) -> ServiceSettings.

Owns the subcommand's parser, the translation of its flags into
`controller.service.ServiceSettings`, and its handler. May import
`dra_driver.cli` at module level and, inside functions, the controller's
settings and service, the Lease settings and `dra_driver.process.runtime`, so
that `dra-driver --help` loads no Kubernetes client.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import TYPE_CHECKING

from controller.legacy.command import add_webhook_serving_args
from dra_driver.cli.args import add_process_args, add_scheduler_policy_args
from dra_driver.cli.registration import Subcommands
from dra_driver.objects.claim_workloads import DRIVER_NAME

if TYPE_CHECKING:
    from controller.gate_webhook import GateWebhookSettings
    from controller.service import ServiceSettings

DEFAULT_METRICS_PORT = 9395
"""HAMi's scheduler serves its metrics on :9395."""
DEFAULT_WEBHOOK_PORT = 8443
"""The allocation-gate webhook's HTTPS port, the legacy scheduler's too."""
LEASE_NAME = "vgpu-hami-io-controller"
"""The leader-election Lease by default; deploy/'s lease-holder policy binds it as its param."""


def register(commands: Subcommands) -> None:
    parser = commands.add_parser(
        "controller",
        help="the DRA claim allocator: HAMi policies for resource.k8s.io/v1 claims",
        description=(
            "Allocate ResourceClaims of this driver's DeviceClasses for pending pods with "
            "HAMi's engine and write status.allocation; leader-elected on a Lease; "
            "refuses to start when the API lacks resource.k8s.io/v1."
        ),
    )
    parser.add_argument("--driver", env="DRIVER_NAME", default=DRIVER_NAME)
    add_scheduler_policy_args(parser)
    parser.add_argument(
        "--standalone-claims",
        action=argparse.BooleanOptionalAction,
        env="STANDALONE_CLAIMS",
        default=False,
        help="also allocate claims no pod refers to",
    )
    parser.add_argument(
        "--mixed-mode",
        action=argparse.BooleanOptionalAction,
        env="MIXED_MODE",
        default=False,
        help="the nodes also serve their GPUs to legacy (device-plugin) pods: count their "
        "HAMi annotations as usage and write allocations under HAMi's node lock",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        env="LEADER_ELECT",
        default=True,
    )
    parser.add_argument("--lease-namespace", env="POD_NAMESPACE", default="default")
    parser.add_argument("--lease-name", env="LEASE_NAME", default=LEASE_NAME)
    parser.add_argument(
        "--identity",
        env="POD_NAME",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="this replica's name in the Lease: the pod name, else host-pid",
    )
    parser.add_argument("--lease-duration", type=float, env="LEASE_DURATION_S", default=15.0)
    parser.add_argument("--renew-deadline", type=float, env="RENEW_DEADLINE_S", default=10.0)
    parser.add_argument("--retry-period", type=float, env="RETRY_PERIOD_S", default=2.0)
    parser.add_argument("--metrics-host", env="METRICS_HOST", default="0.0.0.0")
    parser.add_argument(
        "--metrics-port",
        type=int,
        env="METRICS_PORT",
        default=DEFAULT_METRICS_PORT,
        help="Prometheus /metrics port; 0 disables it",
    )
    parser.add_argument("--webhook-host", env="WEBHOOK_HOST", default="0.0.0.0")
    parser.add_argument(
        "--webhook-port",
        type=int,
        env="WEBHOOK_PORT",
        default=DEFAULT_WEBHOOK_PORT,
        help="HTTPS port of the allocation-gate webhook (/allocation-gate), served on every "
        "replica once --tls-cert and --tls-key are given",
    )
    add_webhook_serving_args(parser, "/allocation-gate")
    add_process_args(parser)
    parser.set_defaults(handler=_run)


def settings_from_args(args: argparse.Namespace) -> ServiceSettings:
    from controller.service import ServiceSettings
    from controller.settings import ControllerSettings, controller_classes
    from dra_driver.kube.leader import LeaderSettings

    leader = (
        LeaderSettings(
            namespace=args.lease_namespace,
            name=args.lease_name,
            identity=args.identity,
            lease_duration_s=args.lease_duration,
            renew_deadline_s=args.renew_deadline,
            retry_period_s=args.retry_period,
        )
        if args.leader_elect
        else None
    )
    return ServiceSettings(
        controller=ControllerSettings(
            driver=args.driver,
            device_classes=controller_classes(),
            gpu_policy=args.gpu_scheduler_policy,
            node_policy=args.node_scheduler_policy,
            allocate_standalone_claims=args.standalone_claims,
            mixed_mode=args.mixed_mode,
        ),
        leader=leader,
        metrics_address=(args.metrics_host, args.metrics_port) if args.metrics_port else None,
        gate_webhook=gate_webhook_from_args(args),
    )


def gate_webhook_from_args(args: argparse.Namespace) -> GateWebhookSettings | None:
    """The webhook's settings, checked (a bad flag is an InvalidParameterError naming it);
    None without TLS: the API server calls webhooks over HTTPS only."""
    from controller.gate_webhook import GateWebhookSettings
    from controller.legacy.caller_auth import ALLOCATION_GATE_PATH
    from controller.legacy.command import caller_auth_from_args, require_webhook_callers
    from controller.legacy.server import ServeSettings

    serve = ServeSettings(
        host=args.webhook_host,
        port=args.webhook_port,
        extender=False,
        webhook=False,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        client_cas=tuple(args.client_ca_file or ()),
    )
    if serve.ssl_context() is None:
        return None
    caller_auth = caller_auth_from_args(args)
    require_webhook_callers(caller_auth, ALLOCATION_GATE_PATH)
    return GateWebhookSettings(serve, caller_auth)


def _run(args: argparse.Namespace) -> int:
    from controller.service import serve_controller
    from dra_driver.process.allocator import fix_mmap_threshold, warn_if_objects_on_glibc
    from dra_driver.process.runtime import configure_logging, run_until_signalled

    configure_logging(args.log_level, args.command)
    warn_if_objects_on_glibc()
    fix_mmap_threshold()
    settings = settings_from_args(args)
    return run_until_signalled(lambda stop: serve_controller(settings, args.kubeconfig, stop))
