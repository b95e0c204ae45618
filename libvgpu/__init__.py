"""The HAMi-core (libvgpu.so) contract: container edits, host install, region reader, monitor.

Import the submodules you need; this package imports nothing itself so that the
pure modules (edits, naming, layout) stay free of prometheus_client, aiohttp and
pynvml.
"""
