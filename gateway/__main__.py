"""``python -m gateway`` / ``conch gateway``: uvicorn with several processes on one port."""

from __future__ import annotations

import uvicorn

from gateway.settings import GatewaySettings
from shared import logs


def main() -> None:
    settings = GatewaySettings.from_env()
    logs.setup("gateway", settings.log_level, settings.log_format)
    uvicorn.run(
        "gateway.app:app_from_env",
        factory=True,
        host=settings.host,
        port=settings.http_port,
        workers=max(1, settings.processes),
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
