"""Aggregated Discovery Service (xDS v3, state of the world) over grpcio's asyncio server.

One stream per Envoy. For each resource type the stream remembers what Envoy subscribed to, what
was last sent (version, names, nonce) and what was ACKed. A response is sent when the snapshot's
version for that type moves past what was sent, or when Envoy asks for a different set of names
(EDS and RDS are not wildcard: a new name list needs an answer even at the same version).
A NACK is logged with Envoy's error and not answered with the same version again; Envoy keeps
serving its last good config meanwhile.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

from controlplane.metrics import Metrics
from controlplane.resources import CLUSTER, ENDPOINT, LISTENER, PUSH_ORDER, ROUTE
from controlplane.snapshot import Snapshot, SnapshotStore, referenced_clusters

log = logging.getLogger("controlplane.ads")

# Types Envoy subscribes to with an empty name list meaning "everything".
_WILDCARD = {LISTENER, CLUSTER}
# Types that point at clusters: sent only once this Envoy ACKed those clusters and endpoints.
_NEEDS_CLUSTERS = {LISTENER, ROUTE}
_stream_ids = itertools.count(1)


def _short(type_url: str) -> str:
    return type_url.rpartition(".")[2]


@dataclass
class _TypeState:
    names: frozenset[str] = frozenset()
    sent_version: int | None = None
    sent_names: frozenset[str] | None = None
    nonce: str = ""
    subscribed: bool = False
    acked_version: int = 0
    acked_names: frozenset[str] = frozenset()


@dataclass
class _Stream:
    stream_id: int
    node: str = "?"
    types: dict[str, _TypeState] = field(default_factory=dict)
    nonces: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class AggregatedDiscoveryService(
    ads_pb2_grpc.AggregatedDiscoveryServiceServicer,  # type: ignore[misc]  # xds-protos: no stubs
):
    def __init__(self, store: SnapshotStore, metrics: Metrics):
        self.store = store
        self.metrics = metrics

    async def StreamAggregatedResources(
        self,
        request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        stream = _Stream(next(_stream_ids))
        requests: asyncio.Queue[discovery_pb2.DiscoveryRequest | None] = asyncio.Queue()
        reader = asyncio.create_task(_pump(request_iterator, requests))
        self.store.stream_opened(stream.stream_id)
        self.metrics.streams.set(self.store.streams)
        try:
            async for response in self._serve(stream, requests):
                yield response
        finally:
            reader.cancel()
            self.store.stream_closed(stream.stream_id)
            self.metrics.streams.set(self.store.streams)
            log.info("xds stream closed", extra={"stream": stream.stream_id, "node": stream.node})

    async def _serve(
        self, stream: _Stream, requests: asyncio.Queue[discovery_pb2.DiscoveryRequest | None]
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        seen = 0
        while True:
            get = asyncio.ensure_future(requests.get())
            change = asyncio.ensure_future(self.store.wait_for_change(seen))
            done, _ = await asyncio.wait({get, change}, return_when=asyncio.FIRST_COMPLETED)
            change.cancel()
            if get in done:
                request = get.result()
                if request is None:
                    return
                self._on_request(stream, request)
            else:
                get.cancel()
            snapshot = self.store.current
            if snapshot is None:
                continue
            seen = snapshot.version
            for type_url in PUSH_ORDER:
                response = self._response_if_due(stream, snapshot, type_url)
                if response is not None:
                    yield response

    def _on_request(self, stream: _Stream, request: discovery_pb2.DiscoveryRequest) -> None:
        if request.node.id:
            if stream.node == "?":
                log.info(
                    "xds stream opened",
                    extra={"stream": stream.stream_id, "node": request.node.id},
                )
            stream.node = request.node.id
        state = stream.types.setdefault(request.type_url, _TypeState())
        if request.response_nonce and request.response_nonce != state.nonce:
            return  # answers a response that was superseded: ignore, as the protocol says
        state.subscribed = True
        state.names = frozenset(request.resource_names)
        if not request.response_nonce:
            state.sent_names = None  # a (re)subscription always gets an answer
            return
        kind = _short(request.type_url)
        if request.HasField("error_detail"):
            self.metrics.nacks.labels(kind).inc()
            log.warning(
                "envoy rejected config (NACK); it keeps its last good version",
                extra={
                    "stream": stream.stream_id,
                    "node": stream.node,
                    "type": kind,
                    "rejected_version": state.sent_version,
                    "kept_version": request.version_info,
                    "error": request.error_detail.message,
                },
            )
            return
        if request.version_info:
            self.metrics.acks.labels(kind).inc()
            state.acked_version = int(request.version_info)
            state.acked_names = state.sent_names or frozenset()
            self.store.record_ack(stream.stream_id, request.type_url, int(request.version_info))
            released = self.store.release_retired()
            if released is not None:
                self.metrics.snapshot_version.set(released.version)

    def _response_if_due(
        self, stream: _Stream, snapshot: Snapshot, type_url: str
    ) -> discovery_pb2.DiscoveryResponse | None:
        state = stream.types.get(type_url)
        if state is None or not state.subscribed:
            return None
        version = snapshot.type_versions[type_url]
        if state.sent_version == version and state.sent_names == state.names:
            return None
        if type_url in _NEEDS_CLUSTERS and not _clusters_acked(stream, snapshot):
            return None  # make-before-break: routes wait until their clusters are in Envoy
        available = snapshot.resources.get(type_url, {})
        if type_url in _WILDCARD and not state.names:
            names = sorted(available)
        else:
            names = sorted(n for n in state.names if n in available)
        resources = []
        for name in names:
            packed = any_pb2.Any()
            packed.Pack(available[name])
            resources.append(packed)
        state.nonce = str(next(stream.nonces))
        state.sent_version = version
        state.sent_names = state.names
        self.metrics.responses.labels(_short(type_url)).inc()
        log.debug(
            "xds response",
            extra={"stream": stream.stream_id, "type": _short(type_url), "version": version},
        )
        return discovery_pb2.DiscoveryResponse(
            version_info=str(version), resources=resources, type_url=type_url, nonce=state.nonce
        )


def _clusters_acked(stream: _Stream, snapshot: Snapshot) -> bool:
    """Has this Envoy ACKed every cluster the routes use, and the endpoints of those clusters?

    Envoy warms a new cluster (endpoints, first health check) before using it; a route that
    arrives earlier answers 503 "no cluster" (NC) until then.
    """
    needed = referenced_clusters(snapshot.resources)
    clusters = stream.types.get(CLUSTER)
    if clusters is None or clusters.acked_version < snapshot.type_versions[CLUSTER]:
        return False
    if not needed <= set(snapshot.resources[CLUSTER]):
        return True  # an invalid reference; validation stops it, never wait on it forever
    endpoints = stream.types.get(ENDPOINT)
    eds_needed = {
        name for name in needed if snapshot.resources[CLUSTER][name].HasField("eds_cluster_config")
    }
    if not eds_needed:
        return True
    return (
        endpoints is not None
        and endpoints.acked_version >= snapshot.type_versions[ENDPOINT]
        and eds_needed <= endpoints.acked_names
    )


async def _pump(
    request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
    queue: asyncio.Queue[discovery_pb2.DiscoveryRequest | None],
) -> None:
    try:
        async for request in request_iterator:
            await queue.put(request)
    except grpc.aio.AioRpcError:
        pass  # Envoy went away; the stream ends below
    finally:
        queue.put_nowait(None)


def add_to_server(server: grpc.aio.Server, service: AggregatedDiscoveryService) -> None:
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(service, server)
