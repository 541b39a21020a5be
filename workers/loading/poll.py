"""Triton's poll model control mode: every worker follows its repositories as they change.

Every ``CONCH_WORKER_REPOSITORY_POLL_SECS`` the worker brings its remote copies up to date
(``Repositories.refresh``) and compares each model directory's fingerprint with the last poll's
(``diff``, pure). When something changed it publishes the repository index again (a removed model
stops being expected at once, an added one is expected until it is ready), then:

- an added model loads as at start;
- a changed model is brought to what its directory now says through the repository API's own
  path (``workers.loading.control_actions.load_model``): new versions load before versions the
  version_policy no longer selects retire (each drained: no request of a version that stays is
  dropped), and versions whose configuration or files changed are reloaded beside the old
  instances, which finish their batch before they unload;
- a removed model unloads (drained the same way); an ensemble is validated and published, or
  unpublished, as the schedulers need.

A model that cannot be read or loaded after a change keeps what was loaded (Triton keeps the
loaded model when a reload fails); its error is in the index or the load errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shared.fleet import change_feed, control, expected_models
from shared.runtime import clock
from shared.storage.repositories import digest_files
from shared.storage.repository import ScanResult
from shared.wire import keys
from workers.loading import control_actions
from workers.loading.control_actions import ModelHost
from workers.loading.repository_index import index_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Changes:
    """What differs between two polls, by model directory name (each list sorted)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def diff(before: Mapping[str, str], after: Mapping[str, str]) -> Changes:
    """The models added, changed (another fingerprint) and removed between two polls."""
    return Changes(
        added=sorted(set(after) - set(before)),
        changed=sorted(n for n in set(after) & set(before) if after[n] != before[n]),
        removed=sorted(set(before) - set(after)),
    )


def changed_versions(before: Mapping[int, str], after: Mapping[int, str]) -> set[int]:
    """The versions present at both polls whose files changed (reloaded in place)."""
    return {v for v in set(before) & set(after) if before[v] != after[v]}


def version_prints(model_dir: Path) -> dict[int, str]:
    """A digest per numeric version directory of its files' names, sizes and times."""
    prints: dict[int, str] = {}
    try:
        children = sorted(model_dir.iterdir())
    except OSError:
        return prints
    for child in children:
        if not (child.is_dir() and child.name.isascii() and child.name.isdigit()):
            continue
        digest = hashlib.sha256()
        digest_files(child, digest)
        prints[int(child.name)] = digest.hexdigest()
    return prints


class RepositoryPoll:
    """The poll loop of one worker (``run``), over the host's repositories."""

    def __init__(self, host: ModelHost, stopping: asyncio.Event):
        self._host = host
        self._stopping = stopping
        self._prints: dict[str, str] = {}
        self._versions: dict[str, dict[int, str]] = {}

    async def baseline(self) -> None:
        """What the repositories hold now (before the start-up scan: a change made while the
        worker loads is seen by the first poll)."""
        self._prints = await asyncio.to_thread(self._host.repositories.fingerprints)
        self._versions = await asyncio.to_thread(self._all_version_prints)

    def _all_version_prints(self) -> dict[str, dict[int, str]]:
        return {
            path.name: version_prints(path)
            for root in self._host.repositories.paths
            if root.is_dir()
            for path in root.iterdir()
            if path.is_dir() and not path.name.startswith(".")
        }

    async def run(self) -> None:
        """Until the worker stops (or the task is cancelled)."""
        interval = self._host.settings.repository_poll_secs
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("repository poll failed; trying again at the next one")

    async def poll(self) -> Changes:
        """One look at the repositories, and what it changed."""
        host = self._host
        repositories = host.repositories
        await asyncio.to_thread(repositories.refresh)
        prints = await asyncio.to_thread(repositories.fingerprints)
        changes = diff(self._prints, prints)
        if not changes:
            return changes
        log.info(
            "model repositories changed",
            extra={"added": changes.added, "changed": changes.changed, "removed": changes.removed},
        )
        scan = await asyncio.to_thread(repositories.scan, not host.settings.strict_model_config)
        await expected_models.write_index(host.redis, index_of(scan))
        for name in changes.removed:
            await self._remove(name)
            self._versions.pop(name, None)
        for name in [*changes.added, *changes.changed]:
            await self._load(name, scan)
        self._prints = prints
        return changes

    async def _load(self, name: str, scan: ScanResult) -> None:
        host = self._host
        wanted = host.settings.models
        model = scan.models.get(name)
        if model is None:
            log.error("model not loadable", extra={"model": name, "error": scan.errors.get(name)})
            return
        if wanted and name not in wanted:
            return
        versions = await asyncio.to_thread(version_prints, model.path)
        changed = changed_versions(self._versions.get(name, {}), versions)
        self._versions[name] = versions
        answer = await control_actions.load_model(host, model, scan, changed=changed)
        _log_answer("load", name, answer)
        await forget_unserved(host, name, answer.unloaded)  # versions the policy dropped

    async def _remove(self, name: str) -> None:
        host = self._host
        message = control.new_message(control.UNLOAD, name)
        answer = await control_actions.unload(host, message)
        _log_answer("unload", name, answer)
        await forget_unserved(host, name, answer.unloaded)
        await expected_models.clear_load_errors(host.redis, [name])  # gone, failed or not


async def forget_unserved(host: ModelHost, model: str, versions: list[int]) -> None:
    """Versions removed from the repositories (a removed model, or a version the
    version_policy no longer selects) that no live worker serves any more leave the model's
    version set: the last worker to unload one removes it."""
    if not versions:
        return
    redis = host.redis
    now = clock.now_ms()
    async with redis.pipeline(transaction=False) as pipe:
        for version in versions:
            pipe.zcount(keys.ready(model, version), now, "+inf")
        counts = await pipe.execute()
    gone = [v for v, count in zip(versions, counts, strict=True) if count == 0]
    if gone:
        # The version set lives in the model's slot, the policy keys in {policy}'s.
        await redis.srem(keys.model_versions(model), *gone)
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.draining(), *(f"{model}:{v}" for v in gone))
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await change_feed.announce(redis, change_feed.MODELS, change_feed.POLICY)


def _log_answer(action: str, name: str, answer: control.ControlAck) -> None:
    fields = {
        "action": action,
        "model": name,
        "status": answer.status,
        "detail": answer.message,
        "loaded": answer.loaded,
        "unloaded": answer.unloaded,
    }
    if answer.status == control.ACK_ERROR:
        log.error("repository change not applied", extra=fields)
    else:
        log.info("repository change applied", extra=fields)
