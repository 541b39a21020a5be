"""The backend table and the list `conch up` plans with name the same backends: a backend added
to one and not the other would be started without a class, or its models sent to the python
worker as a Python-based backend's."""

from __future__ import annotations

from shared.model_config.defaults import WORKER_BACKENDS
from workers.backend_table import BACKENDS


def test_the_backend_table_serves_exactly_the_worker_backends() -> None:
    assert tuple(BACKENDS) == WORKER_BACKENDS
