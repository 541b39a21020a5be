"""The ``conch`` command: the CLI verbs, ``conch up``'s supervisor and what it starts beside the
services (a private Redis, Prometheus, Envoy), and the admin API client.

Services never import this package; it imports them only to start them.
"""
