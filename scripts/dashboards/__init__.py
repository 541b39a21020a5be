"""Conch's Grafana dashboards as code: one module per dashboard, built from grafana.py's panels."""

from __future__ import annotations

from dashboards.gpus import GPUS
from dashboards.grafana import Dashboard
from dashboards.overview import OVERVIEW
from dashboards.queues import QUEUES
from dashboards.versions import VERSIONS
from dashboards.workers import WORKERS

DASHBOARDS: list[Dashboard] = [OVERVIEW, VERSIONS, QUEUES, WORKERS, GPUS]
