#!/usr/bin/env python3
"""Container healthcheck: exit 0 when ``CONCH_HEALTHCHECK_URL`` answers 200 within 2 seconds.

Images are slim and carry no curl; the service's own Python does the GET instead.
"""

import os
import sys
import urllib.request

URL = os.environ.get("CONCH_HEALTHCHECK_URL", "http://127.0.0.1:8000/v2/health/ready")

try:
    with urllib.request.urlopen(URL, timeout=2) as response:
        sys.exit(0 if response.status == 200 else 1)
except Exception as exc:  # any failure means unhealthy
    print(f"unhealthy: {URL}: {exc}", file=sys.stderr)
    sys.exit(1)
