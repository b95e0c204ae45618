"""libvgpu package."""
