"""`dra-driver certs`: the flags that choose a Secret or files, and their checks.

Owns the subcommand's parser and handler; what it does is `dra_driver.tls.certs`,
imported by the handler so that `--help` does not load cryptography or the
Kubernetes client. May import `dra_driver.cli` (the registration contract).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from pathlib import Path

from dra_driver.cli.registration import EXIT_BAD_INPUT, Subcommands
from dra_driver.tls import DEFAULT_CLIENT_NAME


def register(commands: Subcommands) -> None:
    certs = commands.add_parser(
        "certs",
        help="TLS for the legacy webhook/extender: CA + serving cert Secret, kube-scheduler's "
        "client cert Secret, webhook caBundle",
        description=(
            "Create (or keep, when still valid) a CA and a serving certificate for the "
            "Service's DNS names in a kubernetes.io/tls Secret with ca.crt, a client "
            "certificate from the same CA for kube-scheduler in another, and set the "
            "caBundle of the named MutatingWebhookConfigurations. Safe to rerun."
        ),
    )
    certs.add_argument("--namespace", env="POD_NAMESPACE", default="vgpu-system")
    certs.add_argument("--service", env="CERTS_SERVICE", default="vgpu-legacy-scheduler")
    certs.add_argument("--secret", env="CERTS_SECRET", default="vgpu-legacy-scheduler-tls")
    certs.add_argument(
        "--client-secret",
        env="CERTS_CLIENT_SECRET",
        default="vgpu-kube-scheduler-client",
        help="kubernetes.io/tls Secret for the client certificate kube-scheduler presents to "
        "the extender, from the same CA; with --out-dir the stem of its files ('': none)",
    )
    certs.add_argument(
        "--client-name",
        env="CERTS_CLIENT_NAME",
        default=DEFAULT_CLIENT_NAME,
        help="the client certificate's CN: the identity the scheduler's --allowed-callers names",
    )
    certs.add_argument(
        "--webhook",
        action="append",
        env="CERTS_WEBHOOKS",
        help="MutatingWebhookConfiguration to patch (repeatable)",
    )
    certs.add_argument("--validity-days", type=int, env="CERTS_VALIDITY_DAYS", default=3650)
    certs.add_argument(
        "--out-dir",
        type=Path,
        env="CERTS_OUT_DIR",
        help="write ca.crt, ca.key (kept to issue from on later runs), tls.crt, tls.key and the "
        "client pair <client-secret>.crt/.key here instead of Secrets (no API calls)",
    )
    certs.add_argument(
        "--san",
        action="append",
        env="CERTS_SANS",
        default=[],
        help="with --out-dir: DNS:<host name> or IP:<address> the certificate names (repeatable)",
    )
    certs.add_argument("--cluster-domain", env="CLUSTER_DOMAIN", default="cluster.local")
    certs.add_argument(
        "--kubeconfig",
        type=Path,
        env="KUBECONFIG",
        help="kubeconfig file; none: the in-cluster service account",
    )
    certs.set_defaults(handler=_certs)


def _certs(args: argparse.Namespace) -> int:
    from dra_driver.tls.cert_files import CertFilesSettings, run_cert_files
    from dra_driver.tls.certs import CertsSettings, run_certs

    if args.validity_days <= 0:
        print("dra-driver certs: --validity-days must be positive", file=sys.stderr)
        return EXIT_BAD_INPUT
    validity = timedelta(days=args.validity_days)
    if args.out_dir is not None:
        settings = CertFilesSettings.from_flags(
            args.out_dir, args.san, validity, args.client_secret, args.client_name
        )
        return run_cert_files(settings)
    if args.san:
        message = "--san: only with --out-dir; the Secret's certificate names the Service"
        print(f"dra-driver certs: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    settings = CertsSettings(
        namespace=args.namespace,
        service=args.service,
        secret=args.secret,
        webhooks=tuple(args.webhook or ()),
        validity=validity,
        cluster_domain=args.cluster_domain,
        client_secret=args.client_secret or None,
        client_name=args.client_name,
    )
    return asyncio.run(run_certs(args.kubeconfig, settings))
