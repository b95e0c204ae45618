"""Who each simulated component is: the user or ServiceAccount deploy/ runs it as.

The admission policies deploy/ installs decide by `request.userInfo`: only the
vGPU controller and kube-scheduler may write a claim's allocation, only the
legacy scheduler HAMi's pod annotations, only a node's own kubelet plugin or
device plugin what belongs to that node. So the simulation runs every
component under its own token, from its own kubeconfig, as the real cluster
would authenticate it (a plugin's projected ServiceAccount token names its
node), and a tenant's attempt under the tenant's. Were one component to run
as the admin, a policy that refuses it on a real cluster would go unnoticed.
The controller's token is bound to its pod, whose name is its identity in the
leader-election Lease: deploy/'s lease-holder policy admits its claim writes
only while that Lease names it.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

from dra_driver.kube.asyncio_client import aio_client, aio_config
from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.attempts import Identity

DRIVER_NAMESPACE = "vgpu-system"
"""deploy/base's namespace: every driver ServiceAccount lives there."""
CONTROLLER_POD = "vgpu-controller-0"
"""The simulated controller replica's pod: its token's pod-name and its Lease identity."""
CONTROLLER = Identity(service_account=(DRIVER_NAMESPACE, "vgpu-controller"), pod=CONTROLLER_POD)
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

    Clients are made once per identity, each sending its own token, all over one
    connection pool closed by `aclose`: every pool of the official client builds an
    SSL context from the system CA bundle (40 ms of CPU), and the pool is only
    transport — the emulator authenticates each request by its token, as the API
    server does. One pool for 2,000 node identities also means one set of sockets.
    """

    def __init__(self, server: APIServer, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self._tokens: dict[Identity, str] = {}
        self._clients: dict[Identity, KubeClient] = {}
        self._pool: aio_client.ApiClient | None = None

    def token(self, identity: Identity) -> str:
        """The identity's bearer token (issued on first use, then the same one)."""
        if identity not in self._tokens:
            tokens = self.server.tokens
            if identity.service_account is not None:
                namespace, name = identity.service_account
                self._tokens[identity] = tokens.issue_service_account(
                    namespace,
                    name,
                    node_name=identity.node or None,
                    pod_name=identity.pod or None,
                    pod_uid=str(uuid.uuid4()) if identity.pod else None,
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
        """The identity's own client: its kubeconfig's credentials, the shared pool."""
        if identity not in self._clients:
            # The kubeconfig `kubeconfig()` writes, loaded without the file: parsing
            # YAML (30 ms each) took a minute for 2,000 node identities.
            configuration = aio_client.Configuration()
            await aio_config.load_kube_config_from_dict(
                self.server.kubeconfig(token=self.token(identity)),
                client_configuration=configuration,
            )
            self._clients[identity] = KubeClient(self._over_pool(configuration), owns_session=False)
        return self._clients[identity]

    def _over_pool(self, configuration: aio_client.Configuration) -> aio_client.ApiClient:
        """An ApiClient that signs with `configuration` and sends through the pool."""
        if self._pool is None:
            # No connection limit: every node's watches hold a connection for their life.
            self._pool = aio_client.ApiClient(
                aio_client.Configuration(host=configuration.host, connection_pool_maxsize=0)
            )
        api_client = copy.copy(self._pool)
        api_client.configuration = configuration
        return api_client

    async def aclose(self) -> None:
        self._clients.clear()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
