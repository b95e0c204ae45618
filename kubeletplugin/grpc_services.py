"""The gRPC faces kubelet talks to: registration, DRAPlugin v1 and v1beta1,
DRAResourceHealth; thin adapters from wire messages to the preparer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import grpc

from api.generated import (
    dra_health_v1alpha1_pb2 as health_pb2,
)
from api.generated import (
    dra_health_v1alpha1_pb2_grpc as health_grpc,
)
from api.generated import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from kubeletplugin.checkpoint import PreparedDevice
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.preparer import ClaimPreparer, ClaimRef
from kubeletplugin.slices import device_name

DRA_PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
"""v1 first: kubelet picks the first listed service it supports."""


class RegistrationService(pluginregistration_pb2_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.registered = asyncio.Event()
        self.last_error = ""

    async def GetInfo(self, request, context):  # noqa: N802 (gRPC method name)
        return pluginregistration_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(self, request, context):  # noqa: N802
        self.last_error = request.error
        if request.plugin_registered:
            self.registered.set()
        else:
            self.registered.clear()
        return pluginregistration_pb2.RegistrationStatusResponse()


def _claims(request) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]


def _devices(module, devices: Sequence[PreparedDevice], with_share_id: bool) -> list:
    result = []
    for device in devices:
        fields = {
            "request_names": list(device.request_names),
            "pool_name": device.pool_name,
            "device_name": device.device_name,
            "cdi_device_ids": list(device.cdi_device_ids),
        }
        if with_share_id and device.share_id:
            fields["share_id"] = device.share_id
        result.append(module.Device(**fields))
    return result


class DRAPluginV1(dra_v1_pb2_grpc.DRAPluginServicer):
    module = dra_v1_pb2
    with_share_id = True

    def __init__(self, preparer: ClaimPreparer) -> None:
        self.preparer = preparer

    async def NodePrepareResources(self, request, context):  # noqa: N802
        results = await self.preparer.prepare(_claims(request))
        response = self.module.NodePrepareResourcesResponse()
        for uid, result in results.items():
            entry = response.claims[uid]
            if result.error:
                entry.error = result.error
            else:
                entry.devices.extend(_devices(self.module, result.devices, self.with_share_id))
        return response

    async def NodeUnprepareResources(self, request, context):  # noqa: N802
        results = await self.preparer.unprepare(_claims(request))
        response = self.module.NodeUnprepareResourcesResponse()
        for uid, error in results.items():
            response.claims[uid].error = error
        return response


class DRAPluginV1Beta1(DRAPluginV1, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    module = dra_v1beta1_pb2
    with_share_id = False


class HealthWatch(health_grpc.DRAResourceHealthServicer):
    """Streams the full device health list now and on every change."""

    def __init__(self, pool: str, gpus: Callable[[], Sequence[GpuInfo]]) -> None:
        self.pool = pool
        self.gpus = gpus
        self._changed = asyncio.Condition()
        self._version = 0

    async def notify(self) -> None:
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    def snapshot(self):
        now = int(time.time())
        return health_pb2.NodeWatchResourcesResponse(
            devices=[
                health_pb2.DeviceHealth(
                    device=health_pb2.DeviceIdentifier(
                        pool_name=self.pool, device_name=device_name(gpu)
                    ),
                    health=health_pb2.HEALTHY if gpu.healthy else health_pb2.UNHEALTHY,
                    last_updated_time=now,
                    message=gpu.unhealthy_reason,
                )
                for gpu in self.gpus()
            ]
        )

    async def NodeWatchResources(self, request, context):  # noqa: N802
        seen = -1
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda seen=seen: self._version != seen)
                seen = self._version
            yield self.snapshot()


def add_dra_services(server: grpc.aio.Server, preparer: ClaimPreparer, health: HealthWatch) -> None:
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(preparer), server)
    dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(DRAPluginV1Beta1(preparer), server)
    health_grpc.add_DRAResourceHealthServicer_to_server(health, server)
