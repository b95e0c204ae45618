"""Stand-ins for the cluster around the driver: an API server emulator, kubelet, scheduler.

They let the real driver components run end to end in one process, for the
`simulate` command and the integration tests.
"""
