"""Names of the resource.k8s.io/v1 API that the allocators, the stand-ins and the tools share."""

from __future__ import annotations

RESOURCE_API = "/apis/resource.k8s.io/v1"
"""Path prefix of the DRA API group's v1 resources."""

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer on an allocated claim that makes kube-controller-manager deallocate it once
its last reservation goes (reference/kubernetes-dra.md §2)."""
