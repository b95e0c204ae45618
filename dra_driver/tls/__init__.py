"""TLS for the legacy webhook and extender: reloadable serving bundles and the `certs`
command that creates the CA and serving pair (a Secret, or files)."""
