"""cdi package."""
