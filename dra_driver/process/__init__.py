"""What every long-running component needs around its work: logging, signals and task
shutdown, settling gRPC calls, the liveness probe over its own sockets, atomic files."""
