"""Stand-ins for the cluster parts around the driver that cannot run here: kubelet (its
DRA and device-plugin sides, and the pods it runs), kube-scheduler (allocating itself,
or calling an extender), kube-controller-manager's claim-template controller, and the
API server's admission webhooks. They speak the real wire protocols to the real
components, for `simulate` and the integration tests; the API server they talk to is
the emulator in `simulator.apiserver`. Production packages never import them."""
