"""Kubernetes plumbing shared by every component: raw REST calls, informers."""
