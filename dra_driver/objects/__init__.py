"""Kubernetes objects as the driver reads them, shared by the controller, the kubelet
plugin, status and the simulator: a pod's claims, claim workloads, HAMi's pod
resources, the resource.k8s.io path, API timestamps, kube-scheduler's node
predicates, the DRA CEL evaluator, HAMi's node lock rules, names, and users' YAML
files. Plain dicts in, plain values out: no client, no network (a contract in
pyproject.toml keeps it so)."""
