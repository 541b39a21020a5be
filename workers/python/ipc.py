"""Messages between the worker and a Python model process, over one duplex pipe.

A message is pickled with protocol 5 and its NumPy buffers taken out of band: the header (small)
goes first, then each array's memory as its own frame, sent straight from the array without a
copy into the pickle, and received into a ``bytearray`` of the announced size that the unpickled
array views (writable, as Triton's input arrays are, and without a second copy). BYTES tensors
are object arrays of ``bytes`` and pickle in band. Both ends are processes of this project, so
pickle carries no trust problem here.
"""

from __future__ import annotations

import pickle
import struct
from multiprocessing.connection import Connection
from typing import Any

_COUNT = struct.Struct("<I")


def send(conn: Connection, message: Any) -> None:
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    sizes = struct.pack(f"<{len(raws)}Q", *(raw.nbytes for raw in raws))
    conn.send_bytes(_COUNT.pack(len(raws)) + sizes + header)
    for raw in raws:
        conn.send_bytes(raw)


def recv(conn: Connection) -> Any:
    """Receive one message; EOFError/OSError mean the other process is gone."""
    first = conn.recv_bytes()
    (count,) = _COUNT.unpack_from(first)
    sizes = struct.unpack_from(f"<{count}Q", first, _COUNT.size)
    buffers: list[bytearray] = []
    for size in sizes:
        buffer = bytearray(size)
        conn.recv_bytes_into(buffer)
        buffers.append(buffer)
    return pickle.loads(memoryview(first)[_COUNT.size + 8 * count :], buffers=buffers)
