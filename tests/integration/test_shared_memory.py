"""Triton's system shared memory extension on a real redis-server and real POSIX shared memory
(created with tritonclient's own utilities, as a client does): registration rules and texts,
registrations shared by the gateway processes of a host, inputs read and outputs written, and a
region unregistered while a request is in flight."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import redis.asyncio as aioredis
import tritonclient.utils.shared_memory as shm

from gateway.extensions.around_infer import InferExtensions
from gateway.extensions.shared_memory import CUDA, DISABLED, SharedMemoryManager
from gateway.rest.codec import parse_infer_request
from shared.model_config import ModelConfig, from_json
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode

SIZE = 64


@pytest.fixture
def region() -> Iterator[tuple[str, object]]:
    """A fresh POSIX shared memory object of SIZE bytes: (key, handle)."""
    key = f"/conch-test-{uuid.uuid4().hex[:10]}"
    handle = shm.create_shared_memory_region(key.strip("/"), key, SIZE)
    yield key, handle
    shm.destroy_shared_memory_region(handle)


def manager(r: aioredis.Redis, allowed: bool = True) -> SharedMemoryManager:
    return SharedMemoryManager(r, "test-host", allowed)


async def test_register_status_unregister(aredis: aioredis.Redis, region: tuple) -> None:
    key, _ = region
    m = manager(aredis)
    await m.register("r1", key, 16, 32)
    assert await m.status(None) == [{"name": "r1", "key": key, "offset": 16, "byte_size": 32}]
    with pytest.raises(ConchError) as caught:
        await m.register("r1", key, 0, 8)
    assert caught.value.code == ErrorCode.ALREADY_EXISTS
    assert caught.value.message == "shared memory region 'r1' already in manager"
    await m.unregister("r1")
    assert await m.status(None) == []
    with pytest.raises(ConchError, match="Unable to find system shared memory region: 'r1'"):
        await m.status("r1")
    await m.unregister("never-registered")  # Triton answers success


async def test_registration_errors_name_the_region(aredis: aioredis.Redis, region: tuple) -> None:
    key, _ = region
    m = manager(aredis)
    with pytest.raises(ConchError, match="failed to register shared memory region 'r': invalid"):
        await m.register("r", key, 8, SIZE)  # past the end of the object
    with pytest.raises(ConchError, match="Unable to open shared memory region: '/no-such-key'"):
        await m.register("r", "/no-such-key", 0, 8)
    with pytest.raises(ConchError, match="reserved prefix 'triton_python_backend_shm_region_'"):
        await m.register("r", "/triton_python_backend_shm_region_x", 0, 8)
    with pytest.raises(ConchError, match="Unable to open shared memory region"):
        await m.register("r", "/../etc/passwd", 0, 8)  # one name under /dev/shm, nothing else
    with pytest.raises(ConchError) as caught:
        await manager(aredis, allowed=False).register("r", key, 0, 8)
    assert caught.value.code == ErrorCode.UNSUPPORTED and caught.value.message == DISABLED
    assert await m.status(None) == []


async def test_cuda_without_a_gpu_is_not_supported(aredis: aioredis.Redis, region: tuple) -> None:
    m = manager(aredis)
    with pytest.raises(ConchError, match="'cuda0', GPUs not supported"):
        await m.register_cuda("cuda0", b"\0" * 64, 0, 16)
    await m.unregister(None, CUDA)  # unregistering every CUDA region: nothing to do, success
    assert await m.status(None, CUDA) == []
    await m.register("sys", region[0], 0, 8)
    with pytest.raises(ConchError, match="registered as system shared memory, not CUDA"):
        await m.status("sys", CUDA)
    await m.unregister("sys", CUDA)  # the other kind: left alone, as Triton does
    assert len(await m.status(None)) == 1


def request(region_in: str, region_out: str) -> bytes:
    return (
        '{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"INT32","parameters":'
        f'{{"shared_memory_region":"{region_in}","shared_memory_byte_size":16}}}}],'
        '"outputs":[{"name":"OUTPUT0","parameters":'
        f'{{"shared_memory_region":"{region_out}","shared_memory_offset":16,'
        '"shared_memory_byte_size":16}}]}'
    ).encode()


async def test_inputs_read_and_outputs_written_through_another_process(
    aredis: aioredis.Redis, region: tuple
) -> None:
    """Registered through one gateway process, used through another (they share the port)."""
    key, handle = region
    shm.set_shared_memory_region(handle, [np.arange(4, dtype=np.int32)])
    await manager(aredis).register("io", key, 0, SIZE)
    other = InferExtensions(aredis, manager(aredis))
    parsed = parse_infer_request(request("io", "io"), None)
    plan = await other.prepare(parsed)
    assert np.frombuffer(parsed.inputs[0].data, dtype=np.int32).tolist() == [0, 1, 2, 3]
    result = np.array([7, 8, 9, 10], dtype=np.int32)
    finished = await other.finish(
        plan, _config(), [Tensor("OUTPUT0", "INT32", [1, 4], result.tobytes())]
    )
    assert finished.in_shared_memory == {"OUTPUT0"}
    written = shm.get_contents_as_numpy(handle, np.int32, [4], offset=16)
    assert written.tolist() == [7, 8, 9, 10]


async def test_region_unregistered_mid_request_fails_it_and_writes_nothing(
    aredis: aioredis.Redis, region: tuple
) -> None:
    key, handle = region
    shm.set_shared_memory_region(handle, [np.zeros(16, dtype=np.int32)])
    first = manager(aredis)
    await first.register("io", key, 0, SIZE)
    extensions = InferExtensions(aredis, manager(aredis))
    plan = await extensions.prepare(parse_infer_request(request("io", "io"), None))
    await first.unregister("io")  # while the request is executing
    await first.register("io", key, 0, SIZE)  # even registered again under the same name
    output = Tensor("OUTPUT0", "INT32", [1, 4], np.full(4, 5, dtype=np.int32).tobytes())
    with pytest.raises(ConchError, match="'io' was unregistered while the request was in flight"):
        await extensions.finish(plan, _config(), [output])
    assert shm.get_contents_as_numpy(handle, np.int32, [4], offset=16).tolist() == [0, 0, 0, 0]


async def test_bounds_of_a_tensor_in_a_region(aredis: aioredis.Redis, region: tuple) -> None:
    await manager(aredis).register("small", region[0], 0, 8)
    extensions = InferExtensions(aredis, manager(aredis))
    with pytest.raises(ConchError, match=r"Invalid offset \+ byte size .* 'small'"):
        await extensions.prepare(parse_infer_request(request("small", "small"), None))
    with pytest.raises(ConchError, match="Unable to find shared memory region: 'gone'"):
        await extensions.prepare(parse_infer_request(request("gone", "small"), None))


def _config() -> ModelConfig:
    return from_json({"name": "m", "backend": "onnxruntime", "max_batch_size": 8})
