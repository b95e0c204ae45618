"""`dra-driver extender`, `dra-driver webhook`, `dra-driver scheduler` (both in one process).

Owns the three legacy-mode subcommands: their one parser (they differ only in
which HTTP roles they serve), the translation of its flags into the legacy
settings, and the handler. May import `dra_driver.cli` at module level and,
inside the handler, `controller.legacy`'s config and server, the engine's
settings and `dra_driver.process.runtime`.

The flags are HAMi's scheduler flags where HAMi has one (`--scheduler-name`,
`--node-scheduler-policy`, `--gpu-scheduler-policy`, `--node-lock-timeout`,
`--node-lock-retry-timeout`, `--force-overwrite-default-scheduler`,
`--device-config-file`), each with an environment variable. `--authenticate-callers`
(on by default), `--client-ca-file` (repeatable), `--allowed-callers` (/filter,
/bind), `--allowed-webhook-callers` and `--open-webhook` (/webhook) decide who
may call the extender and the webhook. HAMi's
`--node-lock-retry-timeout` applies to PodGroup members only; here every Bind
waits that long (default 20 s) for a held node lock. Heavy imports wait until
a command runs.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.cli.args import EnvArgumentParser, add_process_args, add_scheduler_policy_args
from dra_driver.cli.registration import Subcommands

VENDOR_FLAGS = ("enable-ascend", "enable-iluvatar")
"""HAMi's vendor switches; the registry refuses a name it does not know
(`dra_driver.engine.vendor_backends.registry.ENABLE_FLAGS`), so the two stay equal."""

if TYPE_CHECKING:
    from controller.legacy.config import CallerAuthSettings, LegacySettings
    from controller.legacy.server import ServeSettings


@dataclass(frozen=True, slots=True)
class Role:
    """Which of the legacy scheduler's HTTP halves one command serves."""

    extender: bool
    webhook: bool
    summary: str


ROLES = {
    "extender": Role(True, False, "the kube-scheduler extender (/filter, /bind)"),
    "webhook": Role(False, True, "the mutating admission webhook (/webhook)"),
    "scheduler": Role(True, True, "extender and webhook in one process, as HAMi's scheduler"),
}


def register_extender(commands: Subcommands) -> None:
    _register_role(commands, "extender")


def register_webhook(commands: Subcommands) -> None:
    _register_role(commands, "webhook")


def register_scheduler(commands: Subcommands) -> None:
    _register_role(commands, "scheduler")


def _register_role(commands: Subcommands, name: str) -> None:
    """One legacy command: the same flags for every role, `handler` told which halves run."""
    role = ROLES[name]
    parser = commands.add_parser(
        name,
        help=f"legacy mode: {role.summary}",
        description=(
            f"Legacy (device-plugin) mode, HAMi-compatible: {role.summary}. Served over "
            "HTTP(S) with /healthz and /readyz; reads HAMi's device-config.yaml."
        ),
    )
    parser.add_argument("--host", env="LEGACY_HOST", default="0.0.0.0")
    parser.add_argument("--port", type=int, env="LEGACY_PORT", default=8080)
    add_webhook_serving_args(parser, "/webhook")
    parser.add_argument(
        "--allowed-callers",
        env="ALLOWED_CALLERS",
        default="",
        help="comma-separated usernames (TokenReview) and certificate CNs let into "
        "/filter, /bind and /preempt (kube-scheduler's)",
    )
    parser.add_argument(
        "--enforcement-opt-out-namespaces",
        env="ENFORCEMENT_OPT_OUT_NAMESPACES",
        default="",
        help="comma-separated namespaces whose GPU containers may set CUDA_DISABLE_CONTROL "
        "and GPU_CORE_UTILIZATION_POLICY (an administrator's decision; none by default)",
    )
    parser.add_argument(
        "--device-config-file",
        type=Path,
        env="DEVICE_CONFIG_FILE",
        help="HAMi device-config.yaml (nvidia: resource names and defaults)",
    )
    parser.add_argument("--scheduler-name", env="SCHEDULER_NAME", default="hami-scheduler")
    add_scheduler_policy_args(parser)
    parser.add_argument(
        "--node-lock-timeout",
        type=float,
        env="HAMI_NODELOCK_EXPIRE_SECONDS",
        default=300.0,
        help="seconds after which a node lock is taken over",
    )
    parser.add_argument(
        "--node-lock-retry-timeout",
        type=float,
        env="NODE_LOCK_RETRY_TIMEOUT_SECONDS",
        default=20.0,
        help="seconds a bind waits for a node lock another pod holds (0: fail at once)",
    )
    parser.add_argument(
        "--node-label-selector",
        env="NODE_LABEL_SELECTOR",
        help="only nodes with these labels are scheduled onto (e.g. gpu=on)",
    )
    parser.add_argument(
        "--force-overwrite-default-scheduler",
        action=argparse.BooleanOptionalAction,
        env="FORCE_OVERWRITE_DEFAULT_SCHEDULER",
        default=True,
    )
    parser.add_argument(
        "--mixed-mode",
        action=argparse.BooleanOptionalAction,
        env="MIXED_MODE",
        default=False,
        help="the nodes also serve their GPUs to DRA claims: count the claims' allocations "
        "as usage and re-check them under the node lock at bind",
    )
    for flag in VENDOR_FLAGS:
        parser.add_argument(
            f"--{flag}",
            action="store_true",
            env=flag.upper().replace("-", "_"),
            help=f"HAMi's --{flag}: schedule that vendor's devices too (off by default)",
        )
    add_process_args(parser)
    parser.set_defaults(handler=run_legacy, extender=role.extender, webhook=role.webhook)


def add_webhook_serving_args(parser: EnvArgumentParser, webhook_path: str) -> None:
    """TLS and caller flags of a server the API server's admission client calls: the legacy
    scheduler's /webhook and the DRA controller's /allocation-gate take the same names and
    environment variables."""
    parser.add_argument("--tls-cert", type=Path, env="TLS_CERT", help="serving certificate")
    parser.add_argument("--tls-key", type=Path, env="TLS_KEY", help="its private key")
    parser.add_argument(
        "--client-ca-file",
        type=Path,
        action="append",
        env="CLIENT_CA_FILE",
        help="CA file of client certificates that identify callers (repeatable: the CA of "
        "kube-scheduler's, the cluster's for the API server's)",
    )
    parser.add_argument(
        "--allowed-webhook-callers",
        env="ALLOWED_WEBHOOK_CALLERS",
        default="",
        help=f"comma-separated usernames and certificate CNs let into {webhook_path} (the API "
        "server's admission client)",
    )
    parser.add_argument(
        "--open-webhook",
        action=argparse.BooleanOptionalAction,
        env="OPEN_WEBHOOK",
        default=False,
        help=f"answer {webhook_path} for any caller, for API servers that send no client "
        "certificate (managed clusters); every other guarded path stays authenticated",
    )
    parser.add_argument(
        "--authenticate-callers",
        action=argparse.BooleanOptionalAction,
        env="AUTHENTICATE_CALLERS",
        default=True,
        help="refuse unauthenticated (401) and not-allowed (403) callers; off only on loopback",
    )
    parser.add_argument(
        "--token-review-ttl",
        type=float,
        env="TOKEN_REVIEW_TTL_SECONDS",
        default=10.0,
        help="seconds a TokenReview answer is reused",
    )


def run_legacy(args: argparse.Namespace) -> int:
    """Build the settings from the flags and serve until SIGINT/SIGTERM."""
    from controller.legacy.server import serve_legacy
    from dra_driver.process.runtime import configure_logging, run_until_signalled

    configure_logging(args.log_level, args.command)
    settings, serve = settings_from_args(args)
    return run_until_signalled(lambda stop: serve_legacy(settings, serve, args.kubeconfig, stop))


def settings_from_args(args: argparse.Namespace) -> tuple[LegacySettings, ServeSettings]:
    """The extender's and webhook's settings and how they are served, checked: a bad flag
    is an InvalidParameterError naming it, before anything starts."""
    from controller.legacy.config import LegacySettings, load_device_config
    from controller.legacy.server import ServeSettings
    from dra_driver.engine.engine import EngineSettings
    from dra_driver.engine.policy import parse_gpu_policy, parse_node_policy
    from dra_driver.errors import InvalidParameterError

    parse_gpu_policy(args.gpu_scheduler_policy)
    parse_node_policy(args.node_scheduler_policy)
    if args.node_lock_timeout <= 0:
        raise InvalidParameterError("--node-lock-timeout", "must be a positive number of seconds")
    if args.node_lock_retry_timeout < 0:
        raise InvalidParameterError("--node-lock-retry-timeout", "must be 0 or more seconds")
    allowed = comma_names(args.allowed_callers)
    caller_auth = caller_auth_from_args(args, allowed)
    settings = LegacySettings(
        device_config=load_device_config(args.device_config_file),
        scheduler_name=args.scheduler_name,
        engine=EngineSettings(
            gpu_policy=args.gpu_scheduler_policy, node_policy=args.node_scheduler_policy
        ),
        node_lock_timeout=timedelta(seconds=args.node_lock_timeout),
        node_lock_retry_timeout=timedelta(seconds=args.node_lock_retry_timeout),
        force_overwrite_default_scheduler=args.force_overwrite_default_scheduler,
        node_label_selector=args.node_label_selector,
        enforcement_opt_out_namespaces=comma_names(args.enforcement_opt_out_namespaces),
        mixed_mode=args.mixed_mode,
        enabled_vendor_flags=frozenset(
            flag for flag in VENDOR_FLAGS if getattr(args, flag.replace("-", "_"))
        ),
        caller_auth=caller_auth,
    )
    serve = ServeSettings(
        host=args.host,
        port=args.port,
        extender=args.extender,
        webhook=args.webhook,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        client_cas=tuple(args.client_ca_file or ()),
    )
    serve.ssl_context()
    if args.extender and args.authenticate_callers and not allowed:
        raise InvalidParameterError(
            "--allowed-callers",
            "empty: every /filter, /bind and /preempt would be refused "
            "(or --no-authenticate-callers)",
        )
    if args.webhook:
        require_webhook_callers(caller_auth, "/webhook")
    return settings, serve


def caller_auth_from_args(
    args: argparse.Namespace, allowed_callers: frozenset[str] = frozenset()
) -> CallerAuthSettings:
    """Who may call, from `add_webhook_serving_args`' flags; `allowed_callers` are the
    extender's (kube-scheduler's), none where no extender is served."""
    from controller.legacy.config import CallerAuthSettings
    from dra_driver.errors import InvalidParameterError

    if args.token_review_ttl < 0:
        raise InvalidParameterError("--token-review-ttl", "must be 0 or more seconds")
    return CallerAuthSettings(
        enabled=args.authenticate_callers,
        allowed_callers=allowed_callers,
        allowed_webhook_callers=comma_names(args.allowed_webhook_callers),
        open_webhook=args.open_webhook,
        token_review_ttl=timedelta(seconds=args.token_review_ttl),
    )


def require_webhook_callers(caller_auth: CallerAuthSettings, path: str) -> None:
    """Refuse to start where every call to the served webhook `path` would be refused."""
    from dra_driver.errors import InvalidParameterError

    if (
        caller_auth.enabled
        and not caller_auth.open_webhook
        and not caller_auth.allowed_webhook_callers
    ):
        raise InvalidParameterError(
            "--allowed-webhook-callers",
            f"empty: every {path} would be refused (or --open-webhook, where the API "
            "server sends no client certificate)",
        )


def comma_names(value: str) -> frozenset[str]:
    """A comma-separated flag value as a set of names; blanks between commas are ignored."""
    return frozenset(name.strip() for name in value.split(",") if name.strip())
