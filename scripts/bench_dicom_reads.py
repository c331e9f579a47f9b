"""What ``vitroll audit`` reads from its files before the model sees a pixel: time, read() calls and bytes.

    python scripts/bench_dicom_reads.py                 # pydicom's bundled test files, copied into a folder 10 times
    python scripts/bench_dicom_reads.py --copies 3 --rounds 5
    python scripts/bench_dicom_reads.py --folder dicoms/

Two stages, as the audit runs them: **split** (:func:`~vitroll.audit.pipeline.audit_inputs`, in the main process:
each file's frame count, to cut long multi-frame files into parts) and **decode** (what each input's reader does:
:func:`~vitroll.io.dicom.read_any`, the header and the frames asked for; text detection and the model left out).
Read calls and bytes are this process's ``syscr`` and ``rchar`` from ``/proc/self/io`` (Linux), which count page-cache
hits too. The fastest of ``--rounds`` runs counts; the calls and bytes are the same every round.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Iterable

from vitroll.audit.pipeline import AuditInput, audit_inputs
from vitroll.audit.records import AuditOptions
from vitroll.io.dicom import read_any
from vitroll.io.discovery import given_found_files


def io_counters() -> tuple[int, int]:
    """(read calls, bytes read) of this process so far."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["syscr"]), int(fields["rchar"])


def copy_pydicom_files(folder: Path, copies: int) -> None:
    """pydicom's bundled test files (folders included) into ``folder/copy-N/`` for N < ``copies``."""
    from pydicom.data import get_testdata_files

    for copy in range(copies):
        target = folder / f"copy-{copy}"
        target.mkdir(parents=True)
        for source in map(Path, get_testdata_files()):
            if source.is_dir():
                shutil.copytree(source, target / source.name)
            else:
                shutil.copy(source, target / source.name)


def measured(stage: Callable[[], object]) -> tuple[float, int, int]:
    """(seconds, read calls, bytes read) of one call of ``stage``."""
    calls, read = io_counters()
    start = time.perf_counter()
    stage()
    seconds = time.perf_counter() - start
    after_calls, after_read = io_counters()
    return seconds, after_calls - calls, after_read - read


def decode_all(inputs: Iterable[AuditInput]) -> None:
    """Read every input as the audit's readers do, ignoring the files that give no image."""
    for item in inputs:
        try:
            read_any(item.path, frames=item.frames)
        except Exception:  # noqa: BLE001 — a file that gives no image still costs its reads
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="audit these files instead of pydicom's")
    parser.add_argument("--copies", type=int, default=10, help="copies of pydicom's test files (default 10)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder
        if folder is None:
            folder = Path(scratch) / "files"
            copy_pydicom_files(folder, args.copies)
        files = given_found_files([folder])
        options = AuditOptions(salt="bench")
        inputs = audit_inputs(files, options)
        decode_all(inputs)  # warm: imports, decoder plugins, page cache
        best: dict[str, tuple[float, int, int]] = {}
        for _ in range(args.rounds):
            stages = {"split": lambda: audit_inputs(files, options), "decode": lambda: decode_all(inputs)}
            for name, stage in stages.items():
                result = measured(stage)
                best[name] = min(best.get(name, result), result)
    source = folder if args.folder else f"pydicom test files x {args.copies}"
    print(f"{len(files)} files, {len(inputs)} inputs ({source})")
    print("| stage | seconds | read calls | MB read |")
    print("|---|---|---|---|")
    for name, (seconds, calls, read) in best.items():
        print(f"| {name} | {seconds:.2f} | {calls} | {read / 1e6:.1f} |")


if __name__ == "__main__":
    main()
