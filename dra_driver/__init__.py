"""dra_driver package."""
