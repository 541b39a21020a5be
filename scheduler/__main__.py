"""``python -m scheduler`` / ``conch scheduler``."""

from __future__ import annotations

from scheduler.service import SchedulerService
from scheduler.settings import SchedulerSettings
from shared.runtime import logs, tracing
from shared.runtime.runner import run_service


def main() -> None:
    settings = SchedulerSettings.from_env()
    logs.setup("scheduler", settings.log_level, settings.log_format)
    tracing.setup("scheduler")
    run_service(SchedulerService(settings).run())


if __name__ == "__main__":
    main()
