"""Versioned, validated snapshots of the whole Envoy config, and the rules for replacing one.

The store is the only place a version number is bumped, and it bumps it only after the complete
candidate (every listener, route, cluster and endpoint set) passed validation. A cluster that a
new snapshot drops is kept ("retired") until every connected Envoy has ACKed listeners and routes
that no longer point at it: make-before-break, so no request is routed to a cluster that is gone.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from google.protobuf.message import Message

from controlplane import pgv
from controlplane.resources import CLUSTER, ENDPOINT, LISTENER, PUSH_ORDER, ROUTE, Resources
from controlplane.resources import serialized as serialize

log = logging.getLogger("controlplane.snapshot")


class InvalidSnapshot(ValueError):
    """A candidate config broke a rule; ``problems`` lists each one."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems[:10]))
        self.problems = problems


@dataclass(frozen=True)
class Snapshot:
    version: int
    resources: Resources
    # Per type: the snapshot version at which that type last changed (its version_info).
    type_versions: Mapping[str, int]


def validate(resources: Resources) -> None:
    """Raise ``InvalidSnapshot`` unless Envoy would accept every resource and every reference."""
    problems: list[str] = []
    for type_url in PUSH_ORDER:
        for name, msg in resources.get(type_url, {}).items():
            problems += [f"{type_url.rpartition('.')[2]} {name!r}: {p}" for p in pgv.validate(msg)]
    # The envoy message classes have no stubs (Any): read each kind through Any, not Message.
    by_kind: Mapping[str, Mapping[str, Any]] = resources
    clusters = by_kind.get(CLUSTER, {})
    routes = by_kind.get(ROUTE, {})
    for name, cla in by_kind.get(ENDPOINT, {}).items():
        if cla.cluster_name != name:
            problems.append(f"endpoints {name!r} are named {cla.cluster_name!r}")
        for locality in cla.endpoints:
            for lb in locality.lb_endpoints:
                addr = lb.endpoint.address.socket_address.address
                try:
                    ipaddress.ip_address(addr)
                except ValueError:
                    problems.append(f"endpoints {name!r}: {addr!r} is not an IP address")
    for name, cluster in clusters.items():
        eds = cluster.type == cluster_pb2.Cluster.EDS
        if eds and name not in resources.get(ENDPOINT, {}):
            problems.append(f"cluster {name!r} has no endpoint assignment")
    for name, route_config in routes.items():
        for vhost in route_config.virtual_hosts:
            for route in vhost.routes:
                target = route.route.cluster
                if route.HasField("route") and target and target not in clusters:
                    problems.append(f"route {name!r} points at unknown cluster {target!r}")
    ports: set[int] = set()
    for name, lis in by_kind.get(LISTENER, {}).items():
        port = lis.address.socket_address.port_value
        if port in ports:
            problems.append(f"listener {name!r} reuses port {port}")
        ports.add(port)
        for rds_name in _rds_names(lis):
            if rds_name not in routes:
                problems.append(f"listener {name!r} needs missing route config {rds_name!r}")
    if problems:
        raise InvalidSnapshot(problems)


def _rds_names(lis: listener_pb2.Listener) -> list[str]:
    names = []
    for chain in lis.filter_chains:
        for filt in chain.filters:
            hcm = hcm_pb2.HttpConnectionManager()
            if filt.typed_config.Unpack(hcm) and hcm.HasField("rds"):
                names.append(hcm.rds.route_config_name)
    return names


def referenced_clusters(resources: Resources) -> set[str]:
    """Clusters that some route points at (so they must not disappear first)."""
    names: set[str] = set()
    for route_config in resources.get(ROUTE, {}).values():
        assert isinstance(route_config, route_pb2.RouteConfiguration)
        for vhost in route_config.virtual_hosts:
            names.update(r.route.cluster for r in vhost.routes if r.route.cluster)
            for r in vhost.routes:
                names.update(w.name for w in r.route.weighted_clusters.clusters)
    return names


@dataclass
class _Retired:
    resources: dict[str, Message]  # type_url -> message (the cluster and its endpoints)
    listener_version: int
    route_version: int
    since: float = field(default_factory=time.monotonic)


class SnapshotStore:
    """Holds the current snapshot, wakes the xDS streams on change, tracks what they ACKed."""

    def __init__(self, retire_timeout_s: float = 10.0):
        self.retire_timeout_s = retire_timeout_s
        self.current: Snapshot | None = None
        self.rejected = 0
        self._desired: Resources | None = None
        self._retired: dict[str, _Retired] = {}
        self._acks: dict[int, dict[str, int]] = {}
        self._changed = asyncio.Event()

    def propose(self, desired: Resources, *, check: bool = True) -> Snapshot | None:
        """Publish ``desired`` (plus clusters still being retired) if it is valid and new.

        Returns the new snapshot, or None when nothing changed. Raises ``InvalidSnapshot``
        (and keeps the current snapshot, version and retirements) when the candidate is invalid.
        ``check=False`` exists only for the test that shows how Envoy's NACK is handled.
        """
        old = self.current
        retired = self._next_retired(old, desired)
        candidate = self._merge(desired, retired)
        try:
            if check:
                validate(candidate)
        except InvalidSnapshot:
            self.rejected += 1
            raise
        self._desired = desired
        new_bytes = serialize(candidate)
        old_bytes = serialize(old.resources) if old else {}
        version = (old.version if old else 0) + 1
        type_versions = {
            t: (old.type_versions[t] if old and old_bytes.get(t) == new_bytes.get(t) else version)
            for t in PUSH_ORDER
        }
        for entry in retired.values():
            if entry.listener_version < 0:
                entry.listener_version = type_versions[LISTENER]
                entry.route_version = type_versions[ROUTE]
        self._retired = retired
        if old is not None and new_bytes == old_bytes:
            return None
        self.current = Snapshot(version, candidate, type_versions)
        self._changed.set()
        self._changed = asyncio.Event()
        changed = [t.rpartition(".")[2] for t in PUSH_ORDER if old_bytes.get(t) != new_bytes.get(t)]
        log.info(
            "snapshot published",
            extra={"version": version, "changed": changed, "retired": sorted(retired)},
        )
        return self.current

    def _next_retired(self, old: Snapshot | None, desired: Resources) -> dict[str, _Retired]:
        """Clusters still being retired plus those ``desired`` drops now (thresholds unset)."""
        wanted = desired.get(CLUSTER, {})
        retired = {n: r for n, r in self._retired.items() if n not in wanted}
        if old is None or self._desired is None:
            return retired
        previous = self._desired.get(CLUSTER, {})
        for name, msg in old.resources[CLUSTER].items():
            if name in wanted or name in retired or name not in previous:
                continue
            kept: dict[str, Message] = {CLUSTER: msg}
            if name in old.resources[ENDPOINT]:
                kept[ENDPOINT] = old.resources[ENDPOINT][name]
            retired[name] = _Retired(kept, -1, -1)
        return retired

    @staticmethod
    def _merge(desired: Resources, retired: Mapping[str, _Retired]) -> Resources:
        merged: Resources = {t: dict(desired.get(t, {})) for t in PUSH_ORDER}
        for name, entry in retired.items():
            for type_url, msg in entry.resources.items():
                merged[type_url][name] = msg
        return merged

    def release_retired(self) -> Snapshot | None:
        """Drop retired clusters that no Envoy can still route to; publish if any were."""
        if not self._retired or self._desired is None:
            return None
        now = time.monotonic()
        done = [
            name
            for name, r in self._retired.items()
            if now - r.since >= self.retire_timeout_s
            or all(
                acks.get(LISTENER, 0) >= r.listener_version
                and acks.get(ROUTE, 0) >= r.route_version
                for acks in self._acks.values()
            )
        ]
        if not done:
            return None
        self._retired = {n: r for n, r in self._retired.items() if n not in done}
        log.info("retired clusters released", extra={"clusters": done})
        return self.propose(self._desired)

    @property
    def retired(self) -> list[str]:
        return sorted(self._retired)

    def stream_opened(self, stream_id: int) -> None:
        self._acks[stream_id] = {}

    def stream_closed(self, stream_id: int) -> None:
        self._acks.pop(stream_id, None)

    def record_ack(self, stream_id: int, type_url: str, version: int) -> None:
        self._acks.setdefault(stream_id, {})[type_url] = version

    @property
    def streams(self) -> int:
        return len(self._acks)

    async def wait_for_change(self, seen_version: int) -> None:
        """Return once a snapshot newer than ``seen_version`` exists."""
        event = self._changed
        if self.current is not None and self.current.version > seen_version:
            return
        await event.wait()
