"""Legacy (device-plugin) mode, scheduler side: HAMi-compatible extender and webhook."""
