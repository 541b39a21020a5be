"""gRPC methods of Triton's protocol extensions (shared memory, and the others beside it),
mixed into ``gateway.grpc_service.InferenceService``; the work is the same modules' as REST's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc
from tritonclient.grpc import service_pb2

from gateway import shared_memory as shm
from gateway.errors import GRPC_STATUS, REDIS_ERRORS
from shared.errors import ConchError

if TYPE_CHECKING:
    from gateway.state import GatewayState


class SharedMemoryService:
    """Triton's system and CUDA shared memory RPCs (mixed into the servicer)."""

    state: GatewayState

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        found = await _guard_async(
            context, self.state.shared_memory.status(request.name or None, shm.SYSTEM)
        )
        response = service_pb2.SystemSharedMemoryStatusResponse()
        for entry in found:
            response.regions[entry["name"]].CopyFrom(
                service_pb2.SystemSharedMemoryStatusResponse.RegionStatus(**entry)
            )
        return response

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await _guard_async(
            context,
            self.state.shared_memory.register(
                request.name, request.key, request.offset, request.byte_size
            ),
        )
        return service_pb2.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        await _guard_async(
            context, self.state.shared_memory.unregister(request.name or None, shm.SYSTEM)
        )
        return service_pb2.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        found = await _guard_async(
            context, self.state.shared_memory.status(request.name or None, shm.CUDA)
        )
        response = service_pb2.CudaSharedMemoryStatusResponse()
        for entry in found:
            response.regions[entry["name"]].CopyFrom(
                service_pb2.CudaSharedMemoryStatusResponse.RegionStatus(**entry)
            )
        return response

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await _guard_async(
            context,
            self.state.shared_memory.register_cuda(
                request.name, request.raw_handle, request.device_id, request.byte_size
            ),
        )
        return service_pb2.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        await _guard_async(
            context, self.state.shared_memory.unregister(request.name or None, shm.CUDA)
        )
        return service_pb2.CudaSharedMemoryUnregisterResponse()


async def _guard_async(context: Any, awaitable: Any) -> Any:
    """Await a call, answering its ConchError (or a Redis outage) with the gRPC status."""
    try:
        return await awaitable
    except ConchError as exc:
        await context.abort(GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL), exc.message)
    except REDIS_ERRORS as exc:
        await context.abort(
            grpc.StatusCode.UNAVAILABLE, f"the mesh's Redis is unreachable ({type(exc).__name__})"
        )
