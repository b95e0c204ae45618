"""The offline `explain` command: an inventory file and a workload in, the engine's
decision and every node's reasons out, with no cluster."""
