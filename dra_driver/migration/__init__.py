"""`dra-driver migrate`: what moving a cluster's HAMi workloads to DRA would change."""
