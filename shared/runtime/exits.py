"""Exit codes that the supervisors (``conch up``'s, the gateway's) read.

A process that exits with :data:`EXIT_FINAL` failed in a way that starting it again cannot fix
(its port is taken, a setting is invalid, its processes failed to start several times): the
supervisor stops at once and reports it instead of restarting it.
"""

from __future__ import annotations

EXIT_FINAL = 78  # sysexits' EX_CONFIG
