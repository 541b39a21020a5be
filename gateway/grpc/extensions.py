"""gRPC methods of Triton's protocol extensions (shared memory, and the others beside it),
mixed into ``gateway.grpc.service.InferenceService``; the work is the same modules' as REST's."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc
import msgspec
from tritonclient.grpc import service_pb2

from gateway.admin.guard import check_admin_token
from gateway.errors import GRPC_STATUS, REDIS_ERRORS
from gateway.extensions import shared_memory as shm
from shared.fleet import log_settings
from shared.wire.errors import ConchError

if TYPE_CHECKING:
    from gateway.runtime.state import GatewayState


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


class SettingsService:
    """Triton's trace and logging RPCs (the same settings as
    ``gateway.extensions.settings_routes``); changes need the admin token as the repository RPCs do
    (``RepositoryService``)."""

    state: GatewayState

    async def _repository_guard(self, context: Any) -> None: ...

    async def TraceSetting(self, request: Any, context: Any) -> Any:
        model = request.model_name or None
        if model is not None and model not in self.state.table.configs:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Request for unknown model : {model}"
            )
        traces = self.state.traces
        if request.settings:
            await self._repository_guard(context)
            changes = {
                name: (list(value.value) if name == "trace_level" else value.value[0])
                if value.value
                else None
                for name, value in request.settings.items()
            }
            found = await _guard_async(context, traces.update(model, changes))
        else:
            found = await _guard_async(context, traces.get(model))
        response = service_pb2.TraceSettingResponse()
        for name, value in found.items():
            values = value if isinstance(value, list) else [value]
            response.settings[name].value.extend(values)
        return response

    async def LogSettings(self, request: Any, context: Any) -> Any:
        redis = self.state.redis
        current = await _guard_async(context, log_settings.read(redis))
        if current is None:
            current = log_settings.from_level(logging.getLogger().getEffectiveLevel())
        if request.settings:
            await self._repository_guard(context)
            changes = {name: _parameter(value) for name, value in request.settings.items()}
            try:
                current = log_settings.updated(current, changes)
            except ConchError as exc:
                await context.abort(GRPC_STATUS[exc.code], exc.message)
            await _guard_async(context, log_settings.write(redis, current))
            log_settings.apply(current)
        response = service_pb2.LogSettingsResponse()
        for name, value in msgspec.structs.asdict(current).items():
            setting = response.settings[name]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = value
        return response
