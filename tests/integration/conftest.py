"""Fixtures of the integration tests beyond the shared ones (``tests/conftest.py``)."""

from tests.queue_harness import harness  # noqa: F401 - a fixture: a VersionQueue on real Redis
