"""Generated gRPC stubs; regenerate with `python -m api.generate`."""
