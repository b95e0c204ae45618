"""Who each simulated component is: the user or ServiceAccount deploy/ runs it as.

The admission policies deploy/ installs decide by `request.userInfo`: only the
vGPU controller and kube-scheduler may write a claim's allocation, only the
legacy scheduler HAMi's pod annotations, only a node's own kubelet plugin or
device plugin what belongs to that node. So the simulation runs every
component under its own token, from its own kubeconfig, as the real cluster
would authenticate it (a plugin's projected ServiceAccount token names its
node), and a tenant's attempt under the tenant's. Were one component to run
as the admin, a policy that refuses it on a real cluster would go unnoticed.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.attempts import Identity

DRIVER_NAMESPACE = "vgpu-system"
"""deploy/base's namespace: every driver ServiceAccount lives there."""
CONTROLLER = Identity(service_account=(DRIVER_NAMESPACE, "vgpu-controller"))
LEGACY_SCHEDULER = Identity(service_account=(DRIVER_NAMESPACE, "vgpu-legacy-scheduler"))
KUBE_SCHEDULER = Identity(user="system:kube-scheduler")
KUBE_CONTROLLER_MANAGER = Identity(user="system:kube-controller-manager")
"""As kubeadm names the control plane's users (what the claim-allocation policy allows)."""
KUBE_SCHEDULER_CLIENT_NAME = "vgpu-kube-scheduler"
"""CN of the second kube-scheduler's client certificate (`dra-driver certs --client-name`)."""


def kubelet_plugin(node: str) -> Identity:
    return Identity(service_account=(DRIVER_NAMESPACE, "vgpu-kubelet-plugin"), node=node)


def device_plugin(node: str) -> Identity:
    return Identity(service_account=(DRIVER_NAMESPACE, "vgpu-device-plugin"), node=node)


def kubelet(node: str) -> Identity:
    """A node's kubelet: `system:node:<node>` in `system:nodes`, as the Node authorizer wants."""
    return Identity(user=f"system:node:{node}", groups=("system:nodes",))


class Identities:
    """Issues each identity a token and a kubeconfig, and hands out its KubeClient.

    Clients are made once per identity and closed together by `aclose`.
    """

    def __init__(self, server: APIServer, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self._tokens: dict[Identity, str] = {}
        self._clients: dict[Identity, KubeClient] = {}
        self._stack = AsyncExitStack()

    def token(self, identity: Identity) -> str:
        """The identity's bearer token (issued on first use, then the same one)."""
        if identity not in self._tokens:
            tokens = self.server.tokens
            if identity.service_account is not None:
                namespace, name = identity.service_account
                self._tokens[identity] = tokens.issue_service_account(
                    namespace, name, node_name=identity.node or None
                )
            else:
                self._tokens[identity] = tokens.issue(identity.user, identity.groups)
        return self._tokens[identity]

    def kubeconfig(self, identity: Identity) -> Path:
        """A kubeconfig file holding the identity's token."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = identity.username.replace(":", "-") + (f"-{identity.node}" if identity.node else "")
        return self.server.write_kubeconfig(
            self.directory / f"{name}.kubeconfig", token=self.token(identity)
        )

    async def client(self, identity: Identity) -> KubeClient:
        """The identity's own client, over its own connection pool."""
        if identity not in self._clients:
            client = await KubeClient.from_kubeconfig(self.kubeconfig(identity))
            self._stack.push_async_callback(client.aclose)
            self._clients[identity] = client
        return self._clients[identity]

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._clients.clear()
