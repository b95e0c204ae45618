"""Moving HAMi workloads to DRA: the opt-in mutating webhook (`/migrate`)."""
