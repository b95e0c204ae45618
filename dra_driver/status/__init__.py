"""`dra-driver status`: a kubectl-style view of GPU shares in a cluster."""
