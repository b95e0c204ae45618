"""HAMi's allocation engine: pure data in, decisions out (no Kubernetes, no I/O)."""
