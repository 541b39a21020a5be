"""Longer than 300 lines because the extension's registry, its two kinds of mapping (system
and CUDA) and the request-time checks share one set of invariants; split, each part would reach
into the others' state.

Triton's system shared memory extension: clients on a gateway's host pass tensors by region.

A client creates a POSIX shared memory object, registers it (name, key, offset, byte size), then
names it in an input's or output's parameters instead of sending data. Registrations are kept in
Redis per host (``shared.wire.keys.shm_regions``), so that every gateway process on the host (they
share one port) sees every registration; each process maps a region on first use and remaps it
when the registration changes. Regions are host memory: a gateway on another host cannot see
them, and a client must talk to a gateway on its own host (see docs/protocol.md).

Inputs are copied out of their region when the request arrives; outputs are written into their
region when the reply arrives. A region unregistered (or registered again) while a request that
writes to it is in flight makes that request fail with an error naming the region, and nothing is
written: the client may already have reused or freed the memory.

CUDA shared memory regions (Triton's CUDA shared memory extension) share the registry and the
region names: a client exports a CUDA IPC handle and the gateway copies through the CUDA runtime
(``gateway.extensions.cuda_ipc``); where the host has no GPU, registering one answers Triton's "GPUs
not supported".

Off unless enabled (``CONCH_GATEWAY_ALLOW_CLIENT_SHM``, ``conch up --allow-client-shm``), as
Triton's ``--allow-client-shm``.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec
import redis.asyncio as aioredis

from gateway.extensions import cuda_ipc
from gateway.extensions.shm_params import ShmRef
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode, invalid, not_found

# Triton's own texts (src/common.h, src/shared_memory_manager.cc): clients match on them.
DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
RESERVED_PREFIX = "triton_python_backend_shm_region_"
SHM_DIR = "/dev/shm"
SYSTEM, CUDA = "system", "cuda"


class Registration(msgspec.Struct, frozen=True):
    key: str
    offset: int
    byte_size: int
    # Distinguishes a region registered again under the same name.
    id: str = ""
    kind: str = SYSTEM
    # CUDA regions: the exported cudaIpcMemHandle_t and the device it lives on.
    raw_handle: bytes = b""
    device_id: int = 0


_decode = msgspec.json.Decoder(Registration).decode
_encode = msgspec.json.encode


@dataclass
class _Mapping:
    registration: Registration
    memory: mmap.mmap
    base: int  # where the registration's offset lands in the mapping

    def read(self, offset: int, size: int) -> bytes:
        start = self.base + offset
        return self.memory[start : start + size]

    def write(self, offset: int, data: bytes) -> None:
        start = self.base + offset
        self.memory[start : start + len(data)] = data

    def close(self) -> None:
        with contextlib.suppress(BufferError, ValueError):
            self.memory.close()


@dataclass
class _CudaMapping:
    registration: Registration
    address: int
    runtime: cuda_ipc.CudaRuntime

    def read(self, offset: int, size: int) -> bytes:
        return self.runtime.read(self.address + offset, size, self.registration.device_id)

    def write(self, offset: int, data: bytes) -> None:
        self.runtime.write(self.address + offset, data, self.registration.device_id)

    def close(self) -> None:
        self.runtime.close(self.address)


@dataclass(frozen=True)
class OutputTarget:
    """A requested output that goes to shared memory, with the registration it was checked
    against when the request arrived."""

    output: str
    ref: ShmRef
    registration: Registration


class SharedMemoryManager:
    """One gateway process's view of its host's registered regions."""

    def __init__(self, r: aioredis.Redis, host: str, allowed: bool):
        self._redis = r
        self._key = keys.shm_regions(host)
        self.allowed = allowed
        self._mapped: dict[str, _Mapping | _CudaMapping] = {}

    # --- the extension's API -----------------------------------------------------------------

    async def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_allowed()
        if not name:
            raise invalid("'region name' is necessary to register system shared memory region")
        _check_key(name, key)
        await self._add(name, Registration(key, offset, byte_size, uuid.uuid4().hex))

    async def register_cuda(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self._check_allowed()
        if not name:
            raise invalid("'region name' is necessary to register cuda shared memory region")
        # The first use loads the CUDA runtime (NVML or nvidia-smi, a context): off the loop.
        if await asyncio.to_thread(cuda_ipc.runtime) is None:
            raise invalid(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
            )
        if len(raw_handle) != cuda_ipc.HANDLE_SIZE:
            raise invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        registration = Registration(
            "", 0, byte_size, uuid.uuid4().hex, CUDA, bytes(raw_handle), device_id
        )
        await self._add(name, registration)

    async def _add(self, name: str, registration: Registration) -> None:
        # A file mapped, or a CUDA IPC handle opened (cudaSetDevice, cudaIpcOpenMemHandle): off
        # the loop, which serves every other request meanwhile.
        mapping = await asyncio.to_thread(_map, name, registration)
        if not await self._redis.hsetnx(self._key, name, _encode(registration)):
            mapping.close()
            raise ConchError(
                ErrorCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )
        self._replace(name, mapping)

    async def unregister(self, name: str | None, kind: str = SYSTEM) -> None:
        """One region, or every region of the kind on this host (no name). A name that is not
        registered (or registered as the other kind) is left as it is, as in Triton."""
        self._check_allowed()
        found = await self._all()
        names = [n for n, r in found.items() if r.kind == kind and (not name or n == name)]
        if names:
            await self._redis.hdel(self._key, *names)
        for region in names:
            self._replace(region, None)

    async def status(self, name: str | None, kind: str = SYSTEM) -> list[dict[str, Any]]:
        found = await self._all()
        if name:
            registration = found.get(name)
            if registration is None:
                label = "cuda" if kind == CUDA else "system"
                raise not_found(f"Unable to find {label} shared memory region: '{name}'")
            if registration.kind != kind:
                actual, wanted = ("CUDA", "system") if kind == SYSTEM else ("system", "CUDA")
                raise not_found(
                    f"The region named '{name}' is registered as {actual} shared memory, "
                    f"not {wanted} shared memory"
                )
            found = {name: registration}
        return [_status(n, r) for n, r in sorted(found.items()) if r.kind == kind]

    async def _all(self) -> dict[str, Registration]:
        return {_text(k): _decode(v) for k, v in (await self._redis.hgetall(self._key)).items()}

    # --- inference ---------------------------------------------------------------------------

    async def registrations(self, names: set[str]) -> dict[str, Registration]:
        """The current registrations of these regions (one round trip); unknown ones fail."""
        ordered = sorted(names)
        raws = await self._redis.hmget(self._key, ordered)
        found: dict[str, Registration] = {}
        for name, raw in zip(ordered, raws, strict=True):
            if raw is None:
                self._replace(name, None)
                raise not_found(f"Unable to find shared memory region: '{name}'")
            found[name] = _decode(raw)
        return found

    def read(self, ref: ShmRef, registration: Registration) -> bytes:
        """A copy of the bytes an input names (checked against the region's bounds)."""
        mapping = self._mapping(ref.region, registration)
        _check_bounds(ref, registration)
        return mapping.read(ref.offset, ref.byte_size)

    def check_output(self, output: str, ref: ShmRef, registration: Registration) -> OutputTarget:
        self._mapping(ref.region, registration)
        _check_bounds(ref, registration)
        return OutputTarget(output, ref, registration)

    async def write(self, targets: list[OutputTarget], data: dict[str, bytes]) -> None:
        """Write the outputs into their regions, if every region is still the one the request
        was checked against; otherwise fail naming it, writing nothing."""
        current = await self._redis.hmget(self._key, [t.ref.region for t in targets])
        for target, raw in zip(targets, current, strict=True):
            if raw is None or _decode(raw).id != target.registration.id:
                self._replace(target.ref.region, None)
                raise invalid(
                    f"shared memory region '{target.ref.region}' was unregistered while the "
                    f"request was in flight; output '{target.output}' was not written"
                )
            size = len(data[target.output])
            if size > target.ref.byte_size:
                raise invalid(
                    f"shared memory size specified with the request for output "
                    f"'{target.output}' ({target.ref.byte_size} bytes) should be at least "
                    f"{size} bytes to hold the results"
                )
        for target in targets:
            blob = data[target.output]
            mapping = self._mapping(target.ref.region, target.registration)
            mapping.write(target.ref.offset, blob)

    # --- mappings ----------------------------------------------------------------------------

    def _check_allowed(self) -> None:
        if not self.allowed:
            raise ConchError(ErrorCode.UNSUPPORTED, DISABLED)

    def _mapping(self, name: str, registration: Registration) -> _Mapping | _CudaMapping:
        mapping = self._mapped.get(name)
        if mapping is None or mapping.registration.id != registration.id:
            mapping = _map(name, registration)
            self._replace(name, mapping)
        return mapping

    def _replace(self, name: str, mapping: _Mapping | _CudaMapping | None) -> None:
        old = self._mapped.pop(name, None)
        if old is not None:
            old.close()
        if mapping is not None:
            self._mapped[name] = mapping

    def close(self) -> None:
        for name in list(self._mapped):
            self._replace(name, None)


def _check_key(name: str, key: str) -> None:
    """Triton's ValidateSharedMemoryKey, and a key that is one name under /dev/shm."""
    stripped = key.lstrip("/")
    if not stripped:
        raise invalid(f"cannot register shared memory region '{name}' - invalid shm key '{key}'")
    if stripped.startswith(RESERVED_PREFIX):
        raise invalid(
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{RESERVED_PREFIX}'"
        )
    if "/" in stripped or stripped in (".", "..") or "\0" in stripped:
        raise invalid(f"Unable to open shared memory region: '{key}'")


def _status(name: str, registration: Registration) -> dict[str, Any]:
    if registration.kind == CUDA:
        return {
            "name": name,
            "device_id": registration.device_id,
            "byte_size": registration.byte_size,
        }
    return {
        "name": name,
        "key": registration.key,
        "offset": registration.offset,
        "byte_size": registration.byte_size,
    }


def _map(name: str, registration: Registration) -> _Mapping | _CudaMapping:
    """Open and map the region's object (what shm_open names: a file under /dev/shm), or open
    the CUDA IPC handle."""
    if registration.kind == CUDA:
        runtime = cuda_ipc.runtime()
        if runtime is None:
            raise invalid(f"failed to open CUDA shared memory region: '{name}', GPUs not supported")
        try:
            address = runtime.open(registration.raw_handle, registration.device_id)
        except cuda_ipc.CudaError as exc:
            raise invalid(f"failed to register CUDA shared memory region '{name}': {exc}") from None
        return _CudaMapping(registration, address, runtime)
    key = registration.key
    path = os.path.join(SHM_DIR, key.lstrip("/"))
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        raise invalid(f"Unable to open shared memory region: '{key}'") from None
    try:
        size = os.fstat(fd).st_size
        end = registration.offset + registration.byte_size
        if end > size:
            raise invalid(f"failed to register shared memory region '{name}': invalid args")
        if end == 0:
            memory = mmap.mmap(-1, 1)  # nothing to map; an empty region still registers
            return _Mapping(registration, memory, 0)
        start = registration.offset - registration.offset % mmap.ALLOCATIONGRANULARITY
        memory = mmap.mmap(fd, end - start, offset=start)
        return _Mapping(registration, memory, registration.offset - start)
    finally:
        os.close(fd)


def _check_bounds(ref: ShmRef, registration: Registration) -> None:
    size = registration.byte_size
    if ref.offset >= size and not (ref.offset == 0 and ref.byte_size == 0):
        raise invalid(f"Invalid offset for shared memory region: '{ref.region}'")
    if ref.offset + ref.byte_size > size:
        raise invalid(f"Invalid offset + byte size for shared memory region: '{ref.region}'")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
