"""The legacy node half: a kubelet device plugin (API v1beta1) speaking HAMi's protocol."""
