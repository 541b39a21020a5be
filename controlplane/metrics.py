"""The control plane's Prometheus metrics, in a registry of its own per instance.

A private registry (instead of the process-global one) lets tests run several control planes in
one process and keeps /metrics to exactly what this service reports.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.live_gateways = Gauge(
            "conch_controlplane_live_gateways", "Gateway endpoints currently served", registry=r
        )
        self.snapshot_version = Gauge(
            "conch_controlplane_snapshot_version", "Version of the current snapshot", registry=r
        )
        self.snapshots_rejected = Counter(
            "conch_controlplane_snapshots_rejected",
            "Candidate snapshots that failed validation and were not sent",
            registry=r,
        )
        self.streams = Gauge(
            "conch_controlplane_xds_streams", "Connected ADS streams (Envoy instances)", registry=r
        )
        self.responses = Counter(
            "conch_controlplane_xds_responses",
            "Discovery responses sent",
            ["type"],
            registry=r,
        )
        self.acks = Counter(
            "conch_controlplane_xds_acks", "Discovery responses ACKed", ["type"], registry=r
        )
        self.nacks = Counter(
            "conch_controlplane_xds_nacks", "Discovery responses NACKed", ["type"], registry=r
        )
        self.redis_errors = Counter(
            "conch_controlplane_redis_errors",
            "Failed reads of the gateway registry",
            registry=r,
        )
