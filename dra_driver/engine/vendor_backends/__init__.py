"""HAMi's device families as the legacy scheduler drives them: one backend per vendor.

`base` holds the interface (`VendorBackend`) and its records, `registry` the
list of every backend and how device-config.yaml selects them; each other
module is one vendor. See docs/vendor-backends.md.
"""
