"""REST routes of Triton's system and CUDA shared memory extensions:
``v2/systemsharedmemory[/region/{name}]/status|register|unregister`` and the same under
``v2/cudasharedmemory``. Typed bodies (documented in the OpenAPI schema); the work is
``gateway.extensions.shared_memory``'s."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.exceptions import ValidationException
from litestar.params import Body

from gateway.admin.routes import validation_error_handler
from gateway.extensions.shared_memory import CUDA, SYSTEM, SharedMemoryManager
from shared.wire.errors import invalid

_Size = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class SystemRegisterBody(msgspec.Struct):
    """A POSIX shared memory object (its shm_open key) and the part of it to use."""

    key: str
    byte_size: _Size
    offset: _Size = 0


class RawHandle(msgspec.Struct):
    b64: str


class CudaRegisterBody(msgspec.Struct):
    """A cudaIpcMemHandle_t (base64) exported by the client, its device and size."""

    raw_handle: RawHandle
    byte_size: _Size
    device_id: Annotated[int, msgspec.Meta(ge=0, le=1024)] = 0


class SystemRegionStatus(msgspec.Struct):
    name: str
    key: str
    offset: int
    byte_size: int


class CudaRegionStatus(msgspec.Struct):
    name: str
    device_id: int
    byte_size: int


def _manager(request: Request[Any, Any, Any]) -> SharedMemoryManager:
    manager: SharedMemoryManager = (
        request.app.state.gateway.shared_memory
    )  # app.state is untyped (Any)
    return manager


def _ok() -> Response[Any]:
    return Response(content=b"", status_code=200, media_type="application/json")


@get(["/systemsharedmemory/status", "/systemsharedmemory/region/{name:str}/status"])
async def system_status(
    request: Request[Any, Any, Any], name: str | None = None
) -> list[SystemRegionStatus]:
    found = await _manager(request).status(name, SYSTEM)
    return [SystemRegionStatus(**entry) for entry in found]


@post("/systemsharedmemory/region/{name:str}/register", status_code=200)
async def system_register(
    request: Request[Any, Any, Any], name: str, data: Annotated[SystemRegisterBody, Body()]
) -> Response[Any]:
    await _manager(request).register(name, data.key, data.offset, data.byte_size)
    return _ok()


@post(
    ["/systemsharedmemory/unregister", "/systemsharedmemory/region/{name:str}/unregister"],
    status_code=200,
)
async def system_unregister(
    request: Request[Any, Any, Any], name: str | None = None
) -> Response[Any]:
    await _manager(request).unregister(name, SYSTEM)
    return _ok()


@get(["/cudasharedmemory/status", "/cudasharedmemory/region/{name:str}/status"])
async def cuda_status(
    request: Request[Any, Any, Any], name: str | None = None
) -> list[CudaRegionStatus]:
    found = await _manager(request).status(name, CUDA)
    return [CudaRegionStatus(**entry) for entry in found]


@post("/cudasharedmemory/region/{name:str}/register", status_code=200)
async def cuda_register(
    request: Request[Any, Any, Any], name: str, data: Annotated[CudaRegisterBody, Body()]
) -> Response[Any]:
    try:
        handle = base64.b64decode(data.raw_handle.b64, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t") from None
    await _manager(request).register_cuda(name, handle, data.device_id, data.byte_size)
    return _ok()


@post(
    ["/cudasharedmemory/unregister", "/cudasharedmemory/region/{name:str}/unregister"],
    status_code=200,
)
async def cuda_unregister(
    request: Request[Any, Any, Any], name: str | None = None
) -> Response[Any]:
    await _manager(request).unregister(name, CUDA)
    return _ok()


def shared_memory_router() -> Router:
    return Router(
        path="/v2",
        route_handlers=[
            system_status,
            system_register,
            system_unregister,
            cuda_status,
            cuda_register,
            cuda_unregister,
        ],
        exception_handlers={ValidationException: validation_error_handler},
        tags=["shared memory"],
    )
