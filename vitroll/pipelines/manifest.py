"""The manifest of a batch run — one JSON line per input, appended and fsync'ed per batch — and the lock that
keeps two runs out of one output folder.

Rows are keyed by the input's ``path`` (a text's ``key`` in :mod:`vitroll.pipelines.text_run`); a later row of the
same input replaces the earlier ones. Resuming reads
the manifest back: an input is done when its latest row is ``ok`` with the same settings hash and the same content
(size and modification time). At the end the manifest is compacted (the latest row per input, sorted by path, the
rows of inputs this run did not touch included) and also written as CSV.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import socket
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import AbstractSet, Any, Iterable, Iterator, Optional

from vitroll.errors import VitrollError
from vitroll.io.names import READABLE
from vitroll.io.writing import make_output_folder, write_atomic
from vitroll.wording import argument

MANIFEST = "manifest.jsonl"
SETTINGS = "settings.json"
"""The settings each settings hash of an output folder's rows stands for, so a refused resume can say what differs."""
OUTPUT_COLUMNS = ("overlay", "heatmap", "figure")
"""Row fields that name an output file, relative to the output folder."""
CSV_COLUMNS = (
    "path", "size", "mtime_ns", "status", "error", "width", "height", "seen", "patch_pixels", "top1_index", "top1_name",
    "top1_probability", "peak_x", "peak_y", "entropy", "top10_mass", "key_patches", "agreement", "disagrees", "overlay",
    "heatmap", "figure", "model", "method", "method_options",
    "settings_hash", "vitroll_version",
)


def settings_hash(settings: dict[str, Any]) -> str:
    """Short stable hash of everything that changes the outputs (model, weights, method, rendering)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` as they read back from JSON (tuples as lists, other objects as their ``str``)."""
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """One level of nesting spelt out: ``{"preprocessing": {"crop_pct": 1}}`` → ``{"preprocessing.crop_pct": 1}``."""
    flat: dict[str, Any] = {}
    for name, value in settings.items():
        if isinstance(value, dict) and not prefix:
            flat.update(_flat(value, f"{name}."))
        else:
            flat[prefix + name] = value
    return flat


def _short(value: Any, width: int = 48) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def settings_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``name: old → new`` for every setting that differs between two settings dicts (nested dicts one level deep)."""
    before, after = _flat(_comparable(old)), _flat(_comparable(new))
    return [f"{name}: {_short(before.get(name))} → {_short(after.get(name))}"
            for name in sorted(before.keys() | after.keys()) if before.get(name) != after.get(name)]


UNORDERED_SETTINGS = ("save",)
"""Settings that are a set kept as a list: ``save`` is now kept in one order, but earlier runs kept it as typed, so a
folder made with ``--save heatmap,overlay`` recorded another settings hash for the same outputs."""


def _unordered(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` as read back from JSON, each of :data:`UNORDERED_SETTINGS` as its sorted distinct values."""
    comparable = _comparable(settings)
    for name in UNORDERED_SETTINGS:
        if isinstance(comparable.get(name), list):
            comparable[name] = sorted(set(comparable[name]))
    return comparable


def same_settings_hashes(out_dir: Path, settings: dict[str, Any]) -> set[str]:
    """``settings``' hash and that of every entry of ``OUT/settings.json`` with the same outputs: equal to
    ``settings`` but for the order and repeats of :data:`UNORDERED_SETTINGS`."""
    wanted = _unordered(settings)
    return {settings_hash(settings)} | {recorded_hash for recorded_hash, recorded in read_settings(out_dir).items()
                                        if _unordered(recorded) == wanted}


def read_settings(out_dir: Path) -> dict[str, Any]:
    """``OUT/settings.json``: the settings of each settings hash run into the folder, the newest last (empty when
    absent)."""
    path = out_dir / SETTINGS
    if not path.exists():
        return {}
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise VitrollError(f"{path}: cannot be read ({error}); remove it to resume without it") from None
    return recorded if isinstance(recorded, dict) else {}


def record_settings(out_dir: Path, settings: dict[str, Any]) -> None:
    """Make ``settings`` the newest entry of ``OUT/settings.json``, atomically."""
    current = settings_hash(settings)
    recorded = {key: value for key, value in read_settings(out_dir).items() if key != current}
    recorded[current] = _comparable(settings)
    write_atomic(out_dir / SETTINGS, (json.dumps(recorded, indent=1, ensure_ascii=False) + "\n").encode())


def check_resumable(out_dir: Path, rows: Iterable[dict[str, Any]], settings: dict[str, Any]) -> None:
    """Refuse to resume into ``out_dir`` with ``settings`` when the newest settings it was run with differ and
    made some of ``rows`` (the latest rows of this run's inputs) a success: the folder would mix two settings' maps.
    Rows of settings older than the newest are what an interrupted ``--overwrite`` left to redo, not a conflict.
    A folder of a vitroll that recorded no settings conflicts through any success of another settings hash: its
    rows do not say what that hash stood for, so the only way on is one ``--overwrite``.

    Raises
    ------
    VitrollError
        Naming each setting that differs (``class_names: ["a"] → ["b"]``) and the ways on.
    """
    current = settings_hash(settings)
    recorded = read_settings(out_dir)
    newest = next(reversed(recorded), None)
    same = same_settings_hashes(out_dir, settings)
    if newest in same:
        return
    conflicting = {row.get("settings_hash") for row in rows if row.get("status") == "ok"} - same
    if newest is not None:
        conflicting &= {newest}
    if not conflicting:
        return
    if newest is None:  # its rows' settings cannot be told: rows name the model and method, not the rendering
        raise VitrollError(
            f"{out_dir}: its outputs were made by an older vitroll, which recorded no {SETTINGS} to tell whether they "
            f"match these settings; add {argument('resume', False)} once to redo these inputs (later runs resume), or "
            f"choose another {argument('out_dir')}")
    changes = "; ".join(settings_differences(recorded[newest], settings)) or f"settings hash {newest} → {current}"
    raise VitrollError(
        f"{out_dir}: its outputs were made with other settings ({changes}); rerun with those settings to resume, "
        f"add {argument('resume', False)} to redo these inputs with the new ones, or choose another "
        f"{argument('out_dir')}")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines manifest; a torn last line (a crash mid-write) is ignored.

    Raises
    ------
    VitrollError
        When ``path`` is there but is no file: read as no rows, it would have every output in its folder removed.
    """
    if not path.exists():
        return []
    if not path.is_file():
        raise VitrollError(f"{path}: is not a file, so the manifest cannot be read or written; move it out of the way")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def latest_rows(rows: Iterable[dict[str, Any]], key: str = "path") -> dict[str, dict[str, Any]]:
    """The latest row of each input, by the input's identity ``row[key]`` (an image's path, a text's key)."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        latest[row[key]] = row
    return latest


def outputs_of(row: dict[str, Any]) -> list[str]:
    """The output files a row names, relative to the output folder; a name that would leave it is not one."""
    names = [row[column] for column in OUTPUT_COLUMNS if row.get(column)]
    return [name for name in names if not PurePosixPath(name).is_absolute() and ".." not in PurePosixPath(name).parts]


def is_done(row: Optional[dict[str, Any]], settings_hashes: AbstractSet[str], size: Optional[int],
            mtime_ns: Optional[int], out_dir: Path) -> bool:
    """Whether ``row`` (an input's latest) is a success with these settings (one of ``settings_hashes``, from
    :func:`same_settings_hashes`), made from content of this size and modification time (``None``: the input cannot
    be read now), whose outputs are all still in ``out_dir``."""
    return (row is not None and row["status"] == "ok" and row["settings_hash"] in settings_hashes
            and size is not None and row.get("size") == size and row.get("mtime_ns") == mtime_ns
            and all((out_dir / name).is_file() for name in outputs_of(row)))


def superseded_outputs(rows: Iterable[dict[str, Any]]) -> set[str]:
    """Output files named by a replaced row and by no input's latest row: what a redone input left behind (the
    outputs its new row no longer lists, or all of them when it now failed)."""
    rows = list(rows)
    current = {name for row in latest_rows(rows).values() for name in outputs_of(row)}
    return {name for row in rows for name in outputs_of(row)} - current


class ManifestWriter:
    """Appends rows to a JSON Lines file. Each :meth:`append` is written and flushed before it returns, so a killed
    or interrupted process loses none of its rows; the fsync that makes them survive a power cut runs in a thread of
    its own meanwhile (5 to 35 ms a batch that the main thread, feeding the model, no longer waits for). The next
    :meth:`append` and :meth:`close` wait for it, and raise its failure: so a power cut loses at most the rows of the
    batch settled last, whose files the next run removes (files are renamed into place, not fsync'ed, anyway).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._naming_path():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("a", encoding="utf-8")
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vitroll-manifest-sync")
        self._synced: Optional[Future] = None

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        text = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        if text:
            self._wait_for_sync()
            with self._naming_path():
                self._handle.write(text)
                self._handle.flush()
            self._synced = self._syncer.submit(self._sync)

    def _sync(self) -> None:
        os.fsync(self._handle.fileno())

    def _wait_for_sync(self) -> None:
        synced, self._synced = self._synced, None
        if synced is not None:
            with self._naming_path():
                synced.result()

    @contextmanager
    def _naming_path(self) -> Iterator[None]:
        """A file-system error as one line naming the manifest (a full disk's error names no file of its own)."""
        try:
            yield
        except OSError as error:
            raise VitrollError(f"{self.path}: cannot write the manifest ({error.strerror or error}); the next run "
                               "redoes the inputs whose rows are missing") from None

    def close(self) -> None:
        """Wait for the last fsync (raising its failure), then close the file: rows a failed append left in its
        buffer are flushed once more there, and a full disk's failure then is the same one line."""
        try:
            self._wait_for_sync()
        finally:
            self._syncer.shutdown()
            with self._naming_path():
                self._handle.close()


def write_final(out_dir: Path, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compact ``rows`` (the latest per input, sorted by path) into ``manifest.jsonl`` and ``manifest.csv``
    atomically; returns the compacted rows."""
    final = sorted(latest_rows(rows).values(), key=lambda row: row["path"])
    write_rows(out_dir / MANIFEST, final)
    # a path that is not UTF-8 on disk is spelt with \\x escapes: manifest.jsonl keeps its bytes exactly
    write_atomic(out_dir / "manifest.csv", _csv_text(final).encode("utf-8", READABLE))
    return final


def write_rows(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Replace the JSON Lines file ``path`` with ``rows``, atomically."""
    write_atomic(path, "".join(json.dumps(row, default=str) + "\n" for row in rows).encode())


def _csv_text(rows: list[dict[str, Any]]) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
    return buffer.getvalue()


class OutputLock:
    """``OUT/<name>``: created exclusively with this process's pid; a lock left by a dead process is taken over. ``OUT``
    (with its missing parents) is made unless it is a folder already, before any work, a refusal worded as one line;
    the folders made here and left empty (a run refused before its work) are removed on exit."""

    def __init__(self, out_dir: Path, name: str = ".vitroll.lock") -> None:
        self.path = out_dir / name
        self.made: list[Path] = []
        """The folders made here, ``OUT`` first, then each missing parent up the path."""

    def __enter__(self) -> "OutputLock":
        out_dir = self.path.parent
        if not out_dir.is_dir():
            missing = [out_dir, *itertools.takewhile(lambda folder: not folder.exists(), out_dir.parents)]
            make_output_folder(out_dir)
            self.made = missing
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                owner = self._owner()
                if owner is not None and _alive(owner):
                    raise VitrollError(
                        f"{out_dir}: another vitroll run (pid {owner}) is writing here; wait for it, or "
                        f"remove {self.path} if it is gone") from None
                self.path.unlink(missing_ok=True)  # stale: its process has ended
                continue
            except OSError as error:  # the user knows the folder, not our lock file in it
                raise VitrollError(f"cannot write to the output folder {out_dir} ({error.strerror or error})") \
                    from error
            with os.fdopen(descriptor, "w") as handle:
                handle.write(f"{os.getpid()} {socket.gethostname()}\n")
            return self
        raise VitrollError(f"{self.path}: cannot take the output lock")

    def __exit__(self, *exc_info: object) -> None:
        self.path.unlink(missing_ok=True)
        for folder in self.made:
            try:
                folder.rmdir()  # only while empty: a run that wrote anything keeps it, and the folders above
            except OSError:
                break

    def _owner(self) -> "int | None":
        try:
            pid, host = self.path.read_text().split()[:2]
        except (OSError, ValueError):
            return None
        return int(pid) if host == socket.gethostname() else -1  # another host: assume alive


def _alive(pid: int) -> bool:
    if pid < 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def iter_shard_manifests(out_dir: Path) -> Iterator[Path]:
    yield from sorted(out_dir.glob("manifest.rank*.jsonl"))
