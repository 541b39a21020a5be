"""gRPC methods of Triton's protocol extensions (shared memory, and the others beside it),
mixed into ``gateway.grpc_service.InferenceService``; the work is the same modules' as REST's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc
from tritonclient.grpc import service_pb2

from gateway import shared_memory as shm
from gateway.admin_guard import check_admin_token
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
        status = GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL)
        if _POLL_FAILED in exc.message:
            status = grpc.StatusCode.INTERNAL
        await context.abort(status, exc.message)
    except REDIS_ERRORS as exc:
        await context.abort(
            grpc.StatusCode.UNAVAILABLE, f"the mesh's Redis is unreachable ({type(exc).__name__})"
        )


# Triton answers a load whose files cannot be written with INTERNAL (its TRI-958); gRPC clients
# check for that status. Over HTTP the same error is a 400.
_POLL_FAILED = "failed to poll from model repository"


class RepositoryService:
    """Triton's model repository RPCs: index, load (config override, files), unload."""

    state: GatewayState

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        await self._repository_guard(context)
        entries = await _guard_async(context, self.state.repository.index(request.ready))
        response = service_pb2.RepositoryIndexResponse()
        for entry in entries:
            response.models.add(**entry)
        return response

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        await self._repository_guard(context)
        parameters = {k: _parameter(v) for k, v in request.parameters.items()}
        await _guard_async(context, self.state.repository.load(request.model_name, parameters))
        return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        await self._repository_guard(context)
        parameters = {k: _parameter(v) for k, v in request.parameters.items()}
        await _guard_async(context, self.state.repository.unload(request.model_name, parameters))
        return service_pb2.RepositoryModelUnloadResponse()

    async def _repository_guard(self, context: Any) -> None:
        settings = self.state.settings
        if not settings.repository_requires_admin:
            return
        metadata = dict(context.invocation_metadata() or ())
        try:
            check_admin_token(settings.admin_token, metadata.get("authorization"))
        except ConchError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)


def _parameter(parameter: Any) -> Any:
    choice = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, choice) if choice else None
