"""The local store: bundles on this machine's disk (sources.py puts it and the hub behind one protocol).

Layout of a local store (default: the user cache dir, never /tmp, which tmpfs and reboots wipe):

    <root>/bundles/<NAME>/<version>.pack      payload (bundle.py), renamed into place when complete (format 1:
                                              <version>.tar.zst)
    <root>/bundles/<NAME>/<version>.json      manifest, written last: a version exists once this file exists
    <root>/quarantine/<NAME>/<version>.*      damaged bundles, moved aside with a .reason file
    <root>/runs/<NAME>.json                   what the last run of that cell hit and missed (for `explain`)
    <root>/installed/<NAME>.json              the files NAME's last restore wrote into the cache dirs, as it left them
    <root>/run_builds/<NAME>/                 Triton kernels torch re-tuned at run time after a restore (run_builds.py)
    <root>/locks/<NAME>@<version>.lock        held by the one kernel of this machine fetching that version
    <root>/stats.json                         what every cell that used this store did, summed (see stats.py)

Versions are named by creation time, fingerprint and a random suffix, so two kernels saving the same NAME at once
each commit their own complete version. Payloads are not fsynced: a crash can leave a committed version with
damaged bytes, which its restore detects (every member it writes is hashed) and quarantines; a store is a cache,
and ccache and torch's own caches make the same trade. Pruning and eviction take a file lock. The manifest's mtime
records last use, which drives least-recently-used eviction in `gc`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from ..units import human_bytes
from . import bundle, file_copy, temp_files
from .bundle import DamagedBundle, Manifest
from .run_builds import RunBuilds
from .stats import StoreStats

STORE_DIR_ENV = "JUPYTER_COMPILE_CACHE_DIR"
_swept: set[str] = set()  # stores whose leftovers this process removed already

DEFAULT_MAX_VERSIONS = 3
FETCH_WAIT = 600  # seconds a kernel waits for another kernel of this machine fetching the same version
PAYLOAD_SUFFIXES = {2: ".pack", 1: ".tar.zst"}  # by bundle format


def user_store_dir() -> str:
    """The store's folder where nothing names one: the user cache dir (never /tmp)."""
    import platformdirs

    return platformdirs.user_cache_dir("jupyter_compile_cache", appauthor=False)


def default_store_dir() -> str:
    env = os.environ.get(STORE_DIR_ENV)
    return os.path.abspath(os.path.expanduser(env)) if env else user_store_dir()


RUN_BUILDS = "run-time builds"  # a Removal's version for NAME's kernels built at run time (run_builds.py)


class Removal(NamedTuple):
    """One version a delete removed (or, in a dry run, would remove), or NAME's `RUN_BUILDS`; with `kept`, only
    members of the version went, and `kept` is the version that holds the rest."""

    name: str
    version: str
    bytes: int
    kept: str | None = None


@dataclass(frozen=True)
class UnreadableManifest:
    """A manifest the store could not read, moved to quarantine; the caller tells it."""

    name: str
    version: str
    error: str


@dataclass
class StoredBundle:
    manifest: Manifest
    last_used: float


class LocalStore:
    def __init__(self, root: str | None = None, max_versions: int = DEFAULT_MAX_VERSIONS) -> None:
        self.root = os.path.abspath(root or default_store_dir())
        self.max_versions = max_versions
        if self.root not in _swept:
            _swept.add(self.root)
            self.remove_leftovers()

    def remove_leftovers(self) -> list[str]:
        """Remove the temporary files of saves and pulls whose process is gone (a kernel killed mid-save), and any
        older than an hour; a live writer's file is never touched. Runs when a process first opens the store.
        Returns the paths removed."""
        removed = []
        folders = [self.root, os.path.join(self.root, "runs"), os.path.join(self.root, "installed")]
        with contextlib.suppress(OSError):
            bundles = os.path.join(self.root, "bundles")
            folders += [os.path.join(bundles, name) for name in os.listdir(bundles)]
        for folder in folders:
            removed += _remove_leftovers_in(folder)
        return removed

    # -- paths ------------------------------------------------------------------------------------------------
    def _name_dir(self, name: str) -> str:
        return os.path.join(self.root, "bundles", name)

    def manifest_path(self, manifest: Manifest) -> str:
        return os.path.join(self._name_dir(manifest.name), manifest.version + ".json")

    def payload_path(self, manifest: Manifest) -> str:
        return os.path.join(self._name_dir(manifest.name), manifest.version + PAYLOAD_SUFFIXES[manifest.format])

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        import filelock  # a torch dependency, so always present

        os.makedirs(self.root, exist_ok=True)
        with filelock.FileLock(os.path.join(self.root, ".lock"), timeout=60):
            yield

    # -- reading ----------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        base = os.path.join(self.root, "bundles")
        try:
            return sorted(n for n in os.listdir(base) if os.path.isdir(os.path.join(base, n)))
        except OSError:
            return []

    def versions(self, name: str, problems: list[UnreadableManifest] | None = None) -> list[Manifest]:
        """Committed versions of NAME, newest first. Unreadable manifests are quarantined, and said in `problems`
        when the caller passes a list to tell them."""
        directory = self._name_dir(name)
        try:
            # not ".tmp-*.json": a manifest still being written by a concurrent save
            files = sorted(
                (f for f in os.listdir(directory) if f.endswith(".json") and not f.startswith(".")), reverse=True
            )
        except OSError:
            return []
        result = []
        for fname in files:
            path = os.path.join(directory, fname)
            try:
                with open(path, encoding="utf-8") as f:
                    manifest = Manifest.from_json(json.load(f))
            except FileNotFoundError:  # pruned by another kernel while we listed
                continue
            except (OSError, ValueError, DamagedBundle) as exc:
                version = fname[: -len(".json")]
                self._quarantine_files(name, version, f"unreadable manifest: {exc}")
                if problems is not None:
                    problems.append(UnreadableManifest(name, version, str(exc)))
                continue
            result.append(manifest)
        return result

    def bundles(self) -> list[StoredBundle]:
        out = []
        for name in self.names():
            for manifest in self.versions(name):
                try:
                    last_used = os.stat(self.manifest_path(manifest)).st_mtime
                except OSError:
                    continue
                out.append(StoredBundle(manifest, last_used))
        return out

    def open_payload(self, manifest: Manifest) -> IO[bytes]:
        return open(self.payload_path(manifest), "rb")

    def touch(self, manifest: Manifest) -> None:
        """Record a use, for least-recently-used eviction."""
        with contextlib.suppress(OSError):
            os.utime(self.manifest_path(manifest))

    # -- writing ----------------------------------------------------------------------------------------------
    def write(
        self, manifest: Manifest, files: Mapping[str, str], progress: Callable[[int, int], None] | None = None
    ) -> Manifest:
        """Write a new version holding `files` ({member name: path}); payload fields of `manifest` are filled in.
        `progress(done, total)`: the bytes written so far, of all."""
        manifest.format, manifest.compression = bundle.FORMAT, bundle.COMPRESSION
        fd, tmp = self._temp_payload(manifest)
        try:
            with os.fdopen(fd, "wb") as out:
                members, sha, size = bundle.write_pack(files, out, progress)
            manifest.members, manifest.payload_sha256, manifest.payload_bytes = members, sha, size
            manifest.uses_gpu, manifest.uses_cpu_kernels = bundle.classify(members, files)
            return self._commit(manifest, tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def adopt(self, manifest: Manifest, payload: IO[bytes]) -> Manifest:
        """Store a bundle that arrives as a manifest and a payload stream (`import`, another store). Verifies the
        hash."""
        with self.receive(manifest) as sink:
            while chunk := payload.read(1 << 20):
                sink.write(chunk)
        return manifest

    @contextlib.contextmanager
    def receive(self, manifest: Manifest) -> Iterator[IO[bytes]]:
        """A file for the payload of `manifest` as it arrives (a hub pull writes each verified chunk at its place),
        beside its final place: committed when the block ends and the payload checks out (a format 1 payload hashed
        whole; a format 2 one only its length, its members are hashed as a restore writes them), gone otherwise. A
        payload larger than the free space is refused before a byte is written (a hostile manifest's sizes would fill
        it)."""
        fd, tmp = self._temp_payload(manifest)
        free = shutil.disk_usage(os.path.dirname(tmp)).free
        if manifest.payload_bytes > free:
            os.close(fd)
            os.unlink(tmp)
            raise bundle.BundleError(
                f"{manifest.name!r} holds {human_bytes(manifest.payload_bytes)}, more than the {human_bytes(free)} "
                f"free where the local store is ({self.root}): nothing was written"
            )
        try:
            with os.fdopen(fd, "w+b") as sink:
                yield sink
                sink.flush()
                size = os.fstat(sink.fileno()).st_size
                if manifest.format < 2 and file_copy.hash_range(sink.fileno(), 0, size)[0] != manifest.payload_sha256:
                    raise DamagedBundle("payload fails its sha256 check")
            if size != manifest.payload_bytes:
                raise DamagedBundle(f"payload has {size} bytes, manifest says {manifest.payload_bytes}")
            if manifest.format >= 2 and size != sum(m.size for m in manifest.members):
                raise DamagedBundle("payload size disagrees with its members'")
            self._commit(manifest, tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def fetching(self, manifest: Manifest, wait: float = FETCH_WAIT) -> Iterator[bool]:
        """Single flight on this machine: while the block runs, no other process of this store fetches the same
        version. Yields True when the version is here already (another kernel fetched it while this one waited): the
        block then fetches nothing. A holder that dies lets go (the OS drops its lock); after `wait` seconds the
        block runs anyway, a second fetch being better than a stuck cell."""
        import filelock  # a torch dependency, so always present

        locks = os.path.join(self.root, "locks")
        os.makedirs(locks, exist_ok=True)
        lock = filelock.FileLock(os.path.join(locks, f"{manifest.name}@{manifest.version}.lock"), timeout=wait)
        try:
            lock.acquire()
        except filelock.Timeout:
            yield os.path.exists(self.manifest_path(manifest))
            return
        try:
            yield os.path.exists(self.manifest_path(manifest))
        finally:
            lock.release()

    def _temp_payload(self, manifest: Manifest) -> tuple[int, str]:
        """A temp file for a new payload in NAME's folder; an `rm NAME` may remove the empty folder between our
        makedirs and mkstemp, so that is tried again."""
        directory = self._name_dir(manifest.name)
        suffix = PAYLOAD_SUFFIXES[manifest.format]
        for attempt in range(5):
            try:
                os.makedirs(directory, exist_ok=True)  # FileExistsError: it vanished between two of its checks
                return temp_files.create(directory, ".", suffix)
            except (FileNotFoundError, FileExistsError):
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _commit(self, manifest: Manifest, tmp_payload: str) -> Manifest:
        os.replace(tmp_payload, self.payload_path(manifest))
        _write_json_atomic(self.manifest_path(manifest), manifest.to_json())
        self.prune(manifest.name)
        return manifest

    def prune(self, name: str) -> list[str]:
        """Keep the newest `max_versions` per fingerprint; also sweep temp files that died with their writer."""
        removed = []
        with self._lock():
            per_fp: dict[str, int] = {}
            for manifest in self.versions(name):
                per_fp[manifest.fingerprint_id] = per_fp.get(manifest.fingerprint_id, 0) + 1
                if per_fp[manifest.fingerprint_id] > self.max_versions:
                    self._delete_version(manifest.name, manifest.version)
                    removed.append(manifest.version)
            _remove_leftovers_in(self._name_dir(name))
        return removed

    def _delete_version(self, name: str, version: str) -> None:
        # Manifest first: from then on no reader can pick the version up.
        for suffix in (".json", *PAYLOAD_SUFFIXES.values()):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self._name_dir(name), version + suffix))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.root, "locks", f"{name}@{version}.lock"))

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        """Delete one version or all of NAME (with its kernels built at run time); returns what went (with
        `dry_run`, what would go)."""
        with self._lock():
            targets = [
                Removal(name, m.version, m.payload_bytes) for m in self.versions(name) if version in (None, m.version)
            ]
            run_builds = RunBuilds(self.root).remove(name, dry_run) if version is None else 0
            targets += [Removal(name, RUN_BUILDS, run_builds)] if run_builds else []
            if dry_run:
                return targets
            versions = [t for t in targets if t.version != RUN_BUILDS]
            for target in versions:
                self._delete_version(name, target.version)
            if version is None:
                # Only the versions listed: a save committing now, or still writing its temp file, keeps its
                # files; the folder goes only once it is empty.
                with contextlib.suppress(OSError):
                    os.rmdir(self._name_dir(name))
                for path in (self._run_path(name), self._installed_path(name)):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
        return targets

    def gc(
        self,
        max_bytes: int | None,
        dry_run: bool = False,
        older_than: float | None = None,
        unusable: Callable[[Manifest], bool] | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> list[Removal]:
        """Evict the versions unused for more than `older_than` seconds and those `unusable` says cannot restore,
        then the least recently used until the bundles take at most max_bytes (None: no size limit); first, the
        members `keep` refuses go from every version that holds any (`slim`). Returns what went (with `dry_run`,
        what would go)."""
        now = time.time()
        slimmed = self.slim(keep, dry_run) if keep is not None else []
        with self._lock():
            entries = sorted(self.bundles(), key=lambda b: b.last_used)
            doomed = [
                b
                for b in entries
                if (older_than is not None and now - b.last_used > older_than)
                or (unusable is not None and unusable(b.manifest))
            ]
            total = sum(b.manifest.payload_bytes for b in entries if b not in doomed)
            if dry_run:  # the slimmed versions are still whole: count them as they will be
                total -= sum(r.bytes for r in slimmed)
            for entry in entries:  # oldest first
                if max_bytes is None or total <= max_bytes:
                    break
                if entry not in doomed:
                    doomed.append(entry)
                    total -= entry.manifest.payload_bytes
            evicted = []
            for entry in doomed:
                if not dry_run:
                    self._delete_version(entry.manifest.name, entry.manifest.version)
                evicted.append(Removal(entry.manifest.name, entry.manifest.version, entry.manifest.payload_bytes))
        return slimmed + evicted

    def slim(self, keep: Callable[[str], bool], dry_run: bool = False) -> list[Removal]:
        """Every version holding members that `keep` refuses, written again without them under a new version id of
        the same time and fingerprint (a version never changes), the old one removed; returns a removal per version
        slimmed (with `dry_run`, what would be). A version that fails its checks is left to its next restore, which
        quarantines it."""
        out = []
        with self._lock():
            for stored in self.bundles():
                manifest = stored.manifest
                dropped = [m for m in manifest.members if not keep(m.name)]
                if not dropped or manifest.format < 2:
                    continue
                freed = sum(m.size for m in dropped)
                if dry_run:
                    out.append(Removal(manifest.name, manifest.version, freed, kept=manifest.version))
                    continue
                try:
                    slim = self._rewrite(manifest, keep)
                except (OSError, DamagedBundle):
                    continue
                with contextlib.suppress(OSError):  # its last use stays its last use (gc's order)
                    os.utime(self.manifest_path(slim), (stored.last_used, stored.last_used))
                self._delete_version(manifest.name, manifest.version)
                out.append(Removal(manifest.name, manifest.version, freed, kept=slim.version))
        return out

    def _rewrite(self, manifest: Manifest, keep: Callable[[str], bool]) -> Manifest:
        fd, tmp = self._temp_payload(manifest)
        try:
            with os.fdopen(fd, "wb") as out, self.open_payload(manifest) as payload:
                slim = bundle.copy_slim(payload, manifest, keep, out)
            os.replace(tmp, self.payload_path(slim))  # no prune: the old version goes next, in its place
            _write_json_atomic(self.manifest_path(slim), slim.to_json())
            return slim
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def version_count(self) -> int:
        return sum(len(self.versions(name)) for name in self.names())

    # -- damaged bundles --------------------------------------------------------------------------------------
    def quarantine(self, manifest: Manifest, reason: str) -> str:
        return self._quarantine_files(manifest.name, manifest.version, reason)

    def _quarantine_files(self, name: str, version: str, reason: str) -> str:
        target = os.path.join(self.root, "quarantine", name)
        os.makedirs(target, exist_ok=True)
        for suffix in (".json", *PAYLOAD_SUFFIXES.values()):
            src = os.path.join(self._name_dir(name), version + suffix)
            with contextlib.suppress(FileNotFoundError):
                os.replace(src, os.path.join(target, version + suffix))
        with open(os.path.join(target, version + ".reason"), "w", encoding="utf-8") as f:
            f.write(reason + "\n")
        return target

    # -- last run of each cell, for `explain` -----------------------------------------------------------------
    def _run_path(self, name: str) -> str:
        return os.path.join(self.root, "runs", name + ".json")

    def save_run(self, name: str, data: Mapping[str, Any]) -> None:
        path = self._run_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_json_atomic(path, dict(data))

    def last_run(self, name: str) -> dict[str, Any] | None:
        try:
            with open(self._run_path(name), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    # -- the files a restore wrote, for the next kernel's restore of the same version ---------------------------
    def _installed_path(self, name: str) -> str:
        return os.path.join(self.root, "installed", name + ".json")

    def installed(self, name: str, key: str) -> list[str] | None:
        """The files NAME's last restore wrote for KEY (its version and cache dirs), where each is still the file it
        wrote, unchanged (`file_stamp`): a restarted kernel neither copies nor hashes them again. None otherwise."""
        try:
            with open(self._installed_path(name), encoding="utf-8") as f:
                data = json.load(f)
            if data["key"] != key:
                return None
            files = [(str(path), list(stamp)) for path, stamp in data["files"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return [path for path, _ in files] if all(file_stamp(path) == stamp for path, stamp in files) else None

    def note_installed(self, name: str, key: str, paths: list[str]) -> None:
        path = self._installed_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_json_atomic(path, {"key": key, "files": [[p, file_stamp(p)] for p in paths]}, durable=False)

    # -- cumulative statistics (stats.py) ------------------------------------------------------------------------
    def _stats_path(self) -> str:
        return os.path.join(self.root, "stats.json")

    def read_stats(self) -> StoreStats:
        """The statistics since they were last zeroed; an unreadable file reads as none (it is rewritten next)."""
        try:
            with open(self._stats_path(), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return StoreStats()
        return StoreStats.from_json(data) if isinstance(data, dict) else StoreStats()

    def add_stats(self, outcome: Mapping[str, float]) -> None:
        with self._lock():  # two kernels finishing cells at once both count
            stats = self.read_stats()
            stats.add(outcome)
            _write_json_atomic(self._stats_path(), stats.to_json(), durable=False)

    def zero_stats(self) -> StoreStats:
        """Start the statistics again; returns what they were."""
        with self._lock():
            before = self.read_stats()
            _write_json_atomic(self._stats_path(), StoreStats(time.time()).to_json(), durable=False)
        return before

    def usage(self) -> tuple[int, int, int]:
        """(bytes, versions, names) of the committed bundles."""
        stored = self.bundles()
        return sum(b.manifest.payload_bytes for b in stored), len(stored), len({b.manifest.name for b in stored})


def _remove_leftovers_in(folder: str) -> list[str]:
    """The temporary files in FOLDER that nobody writes any more (storage/temp_files.py), removed."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for fname in names:
        path = os.path.join(folder, fname)
        if fname.startswith(".tmp-") and temp_files.is_leftover(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
    return removed


def file_stamp(path: str) -> list[int] | None:
    """What changes whenever a file is written or replaced: its inode, size, and modification and change times
    (the change time cannot be set back), as ccache's inode cache keys a file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _write_json_atomic(path: str, data: Any, durable: bool = True) -> None:
    """Replace `path` whole; `durable`: on disk before the rename (statistics, written after every cell, need not)."""
    directory = os.path.dirname(path)
    fd, tmp = temp_files.create(directory, ".", ".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True, default=str)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
