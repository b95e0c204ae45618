"""kubeletplugin package."""
