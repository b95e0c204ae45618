"""`dra-driver simulate`: the real components on emulated nodes with mock GPUs.

The composition root above `controller` and `kubeletplugin`: it starts the API
emulator, a real kubelet plugin per node (mock GPUs, real gRPC on unix
sockets), the kubelet and kube-scheduler stand-ins that call them, and the real
controller, applies workloads, and reports who got which share.
"""
