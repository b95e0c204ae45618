"""TLS for the legacy webhook and extender: reloadable serving bundles and the `certs`
command that creates the CA, the serving pair and kube-scheduler's client pair (Secrets, or
files)."""

DEFAULT_CLIENT_NAME = "vgpu-kube-scheduler"
"""CN of the second kube-scheduler's client certificate (cert-manager's Certificate has the
same): the identity the shipped scheduler's `--allowed-callers` lets into /filter and /bind.
Here, not in `certs`, so that the command's `--help` need not import cryptography."""
