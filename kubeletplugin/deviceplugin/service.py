"""The DevicePlugin gRPC face kubelet calls: thin adapters over the device list
and the pod allocator.

Options: GetPreferredAllocation is offered (it steers kubelet's replica
choice onto the GPUs the scheduler picked); PreStartContainer is served but
not requested, since nothing has to happen between Allocate and start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import grpc

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.generated import deviceplugin_v1beta1_pb2_grpc as pb2_grpc
from kubeletplugin.deviceplugin.allocation import AllocateError
from kubeletplugin.deviceplugin.allocator import PodAllocator
from kubeletplugin.deviceplugin.mig_allocate import MigAnswer
from libvgpu.container_edits import ContainerEdits

log = logging.getLogger(__name__)

OPTIONS = pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


class DeviceBoard:
    """The replica list kubelet watches, and a version bumped on every change."""

    def __init__(self) -> None:
        self.devices: tuple[pb2.Device, ...] = ()
        self.version = 0
        self._changed = asyncio.Condition()

    async def publish(self, devices: Sequence[pb2.Device]) -> None:
        async with self._changed:
            self.devices = tuple(devices)
            self.version += 1
            self._changed.notify_all()

    async def wait_newer(self, version: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.version > version)


def allocate_response(edits: ContainerEdits | MigAnswer) -> pb2.ContainerAllocateResponse:
    if isinstance(edits, MigAnswer):
        return pb2.ContainerAllocateResponse(
            envs={variable.name: variable.value for variable in edits.env},
            devices=[
                pb2.DeviceSpec(
                    container_path=node.container_path,
                    host_path=node.host_path,
                    permissions="rw",
                )
                for node in edits.devices
            ],
        )
    return pb2.ContainerAllocateResponse(
        envs={variable.name: variable.value for variable in edits.env},
        mounts=[
            pb2.Mount(
                container_path=mount.container_path,
                host_path=mount.host_path,
                read_only=mount.read_only,
            )
            for mount in edits.mounts
        ],
    )


class DevicePluginService(pb2_grpc.DevicePluginServicer):
    def __init__(self, board: DeviceBoard, allocator: PodAllocator) -> None:
        self.board = board
        self.allocator = allocator

    async def GetDevicePluginOptions(self, request, context):  # noqa: N802 (gRPC method name)
        return OPTIONS

    async def ListAndWatch(  # noqa: N802 (gRPC method name)
        self, request, context
    ) -> AsyncIterator[pb2.ListAndWatchResponse]:
        while True:
            version = self.board.version
            yield pb2.ListAndWatchResponse(devices=list(self.board.devices))
            await self.board.wait_newer(version)

    async def GetPreferredAllocation(self, request, context):  # noqa: N802 (gRPC method name)
        responses = []
        for ask in request.container_requests:
            chosen = await self.allocator.preferred(
                list(ask.available_deviceIDs), list(ask.must_include_deviceIDs), ask.allocation_size
            )
            responses.append(pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb2.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(self, request, context):  # noqa: N802 (gRPC method name)
        responses = []
        for ask in request.container_requests:
            try:
                edits = await self.allocator.allocate(list(ask.devices_ids))
            except AllocateError as error:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
            responses.append(allocate_response(edits))
        return pb2.AllocateResponse(container_responses=responses)

    async def PreStartContainer(self, request, context):  # noqa: N802 (gRPC method name)
        return pb2.PreStartContainerResponse()
