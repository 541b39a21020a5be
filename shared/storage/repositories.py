"""Several model repositories as one, with Triton's rules (``--model-repository`` repeated).

A model name found in two repositories is served from neither: Triton reports it "not unique
across all model repositories" and loads the others. A location is a local directory or a remote
one (``s3://...``, ``shared.storage.remote``); a remote location is read through a local copy
that :meth:`Repositories.refresh` brings up to date, so every other part of Conch reads models
from local directories only.

``fingerprints`` is what ``--model-control-mode poll`` compares between two polls: a model whose
files changed (a new, removed or rewritten file, or its configuration) has a new fingerprint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from shared.storage import remote
from shared.storage.repository import RepositoryModel, ScanResult, read_model
from shared.wire.errors import ConchError, invalid

# The separator of several locations in one setting (CONCH_WORKER_MODEL_REPOSITORY): a comma,
# since a colon is part of s3://host:port locations.
SEPARATOR = ","


def split_locations(text: str) -> list[str]:
    """Locations of a comma-separated setting, in order, blanks dropped."""
    return [part.strip() for part in text.split(SEPARATOR) if part.strip()]


@dataclass(frozen=True)
class Root:
    """One repository: where the user named it, and the local directory read for it."""

    location: str
    path: Path
    remote: remote.RemoteRepository | None = None


class Repositories:
    """Every repository of a service, in the order given."""

    def __init__(
        self,
        locations: list[str],
        cache_dir: str | Path | None = None,
        config_name: str = "",
    ):
        if not locations:
            raise invalid("no model repository given; expected --model-repository PATH or s3://")
        self.config_name = config_name
        roots: list[Root] = []
        for index, location in enumerate(locations):
            found = remote.parse(location)
            if found is None:
                path = Path(location).expanduser().resolve()
                if not path.is_dir():
                    raise invalid(f"model repository '{location}' is not a directory")
                roots.append(Root(location, path))
            else:
                copy = remote.copy_dir(cache_dir, index, found)
                roots.append(Root(location, copy, found))
        self.roots = roots

    @classmethod
    def from_setting(
        cls, text: str, cache_dir: str | Path | None = None, config_name: str = ""
    ) -> Repositories:
        return cls(split_locations(text), cache_dir, config_name)

    @property
    def paths(self) -> list[Path]:
        return [root.path for root in self.roots]

    @property
    def upload_root(self) -> Path:
        """Where model files sent with a load request are written for a model on no disk."""
        return self.roots[0].path

    def refresh(self, model: str | None = None) -> None:
        """Bring the local copy of each remote repository up to date (blocking; ``model``: that
        model's directory only). Local repositories are read where they are."""
        for root in self.roots:
            if root.remote is not None:
                remote.sync(root.remote, root.path, model)

    def scan(self, auto_complete: bool = True) -> ScanResult:
        """Every model of every repository; a name in two repositories is an error, not a model."""
        seen: dict[str, list[Path]] = {}
        for root in self.paths:
            for entry in _model_dirs(root):
                seen.setdefault(entry.name, []).append(entry)
        models: dict[str, RepositoryModel] = {}
        errors: dict[str, str] = {}
        for name, dirs in sorted(seen.items()):
            if len(dirs) > 1:
                places = ", ".join(self._location_of(d) for d in dirs)
                errors[name] = (
                    f"model '{name}' is not unique across all model repositories ({places})"
                )
                continue
            try:
                models[name] = read_model(
                    dirs[0], auto_complete=auto_complete, config_name=self.config_name
                )
            except ConchError as exc:
                errors[name] = exc.message
        return ScanResult(models=models, errors=errors)

    def dirs_of(self, name: str) -> list[Path]:
        """Every directory named ``name`` in the repositories, from one look at each (more than
        one: the name is not unique)."""
        return [root / name for root in self.paths if (root / name).is_dir()]

    def fingerprints(self) -> dict[str, str]:
        """A digest per model directory name of its files' names, sizes and modification times
        (several directories of one name digest together, so a duplicate that appears or goes
        changes it too)."""
        digests: dict[str, hashlib._Hash] = {}
        for root in self.paths:
            for entry in _model_dirs(root):
                digest = digests.setdefault(entry.name, hashlib.sha256())
                digest.update(str(entry).encode())
                digest_files(entry, digest)
        return {name: digest.hexdigest() for name, digest in digests.items()}

    def _location_of(self, model_dir: Path) -> str:
        for root in self.roots:
            if model_dir.parent == root.path:
                return root.location
        return str(model_dir.parent)


def digest_files(directory: Path, digest: hashlib._Hash) -> None:
    """Feed ``digest`` the relative name, size and modification time of each file below
    ``directory``: what a poll compares (Triton's poll also goes by modification times)."""
    for path in sorted(directory.rglob("*")):
        try:
            stat = path.stat()
        except OSError:  # removed while walking: the next poll sees it
            continue
        if path.is_file():
            relative = path.relative_to(directory).as_posix()
            digest.update(f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())


def _model_dirs(root: Path) -> list[Path]:
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    return [e for e in entries if e.is_dir() and not e.name.startswith(".")]


# Where local copies of remote repositories live when no cache directory is configured.
default_cache_dir = remote.default_cache_dir
