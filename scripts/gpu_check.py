"""GPU check: prove vitroll's CUDA path and measure it, in one unattended run of under 5 minutes.

    python scripts/gpu_check.py                                    # CUDA machine: writes docs/gpu_check.{md,json}
    python scripts/gpu_check.py --device cpu --quick --out /tmp/gc  # the same code on tiny sizes, in seconds

Items, in order; each is timed, each error is recorded (with the end of its traceback) and the run goes on, and an
item whose estimate no longer fits in the time budget (``--budget``, 270 s) is skipped with a note:

1. ``pytest -m cuda`` in a subprocess (tests/test_cuda.py: device placement of every method, autocast maps against
   float32, the out-of-memory halving, capture leaving the logits unchanged, annotate on CUDA): counts and failures;
2. rollout / forward for vit_small_patch16_224 and vit_base_patch16_224 (random init, built with timm's
   ``img_size``) at N = 197 (224 px, batch 64), 1025 (512 px, batch 8) and 4097 (1024 px, batch 1 — dense records
   — and batch 8 — factored), fp32 and bf16 autocast: after warm-up, forward and rollout alternate, each timed with
   CUDA events (``perf_counter`` after a synchronisation on CPU); the peak memory of each above the resident model
   and input from ``torch.cuda.max_memory_allocated``, reset before each;
3. the dense record paths side by side: vit_base at N = 1025 (batch 8) and 4097 (batch 1), fp32 and bf16, rollout
   with its head-mean record forced onto the blocked kernel, then onto the model's fused kernel with the head mean
   from its factors in PyTorch, then in Triton (``vitroll.capture.head_mean``), each row timed as in 2;
4. annotate end to end (with its default writer threads, then with 2) vs the plain batched forward vs one image at
   a time (``bench_batch.measure``), fp32 and bf16.

Estimate for an H200 (:func:`plan_estimate`, printed at the start and kept in the report): forward FLOPs
4·L·N·D·(6·D + N) per image (0.5 … 10.5 TFLOP per batch), at an assumed 30 TFLOP/s in fp32 (TF32 off, PyTorch's
default) and 200 TFLOP/s in bf16, rollout at 4 forwards (pessimistic: rollout materialises every attention map),
14 passes of each per row: about 57 s for the 16 rows, plus 2 s for each of the 8 models built; 28 s for the 12
record-path rows; annotate 10–12 s per precision (512 images); the CUDA tests 60 s; start-up 15 s: about 199 s in
all, 71 s inside the budget (the run before the record-path rows took 100 s against an estimate of 168 s). Once a row
is measured, its FLOP rate and ratio replace the assumptions for the rows after it. A watchdog writes what is done
and ends the process if an item hangs past the budget plus 60 s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional
from unittest import mock

import timm
import torch

import bench_batch
import vitroll
from vitroll import rollout
from vitroll.capture import factored as factored_module
from vitroll.capture import head_mean as head_mean_module
from vitroll.capture import recorder as recorder_module
from vitroll.capture.recorder import default_attention_budget
from vitroll.pipelines.folder import AnnotateOptions
from vitroll.testbed.training import wrapped_card

REPO = Path(__file__).resolve().parents[1]
MODELS = ("vit_small_patch16_224", "vit_base_patch16_224")
PRECISIONS = ("fp32", "bf16")
ASSUMED_FLOPS = {("cuda", "fp32"): 30e12, ("cuda", "bf16"): 200e12, ("cpu", "fp32"): 20e9, ("cpu", "bf16"): 10e9}
"""Forward FLOP/s assumed for estimates until a measurement replaces them."""
ASSUMED_ROLLOUT_RATIO = 4.0
GOALS = {1025: 1.5, 4097: 2.0}
"""rollout / forward goals of issue 24, by N; annotate ≥ 0.8 × the plain forward and ≥ 3 × the per-image baseline."""
WATCHDOG_GRACE_S = 60.0
RECORD_PATH_SIZES = ((512, 8), (1024, 1))
"""(pixels, batch) of the dense rows where the record paths are compared side by side (vit_base)."""


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    sizes: tuple[tuple[int, int], ...]
    """(pixels, batch) per row; N = (pixels / 16)² + 1."""
    depth: Optional[int]
    """Layers of the models built (None: their own 12)."""
    attention_budget: Optional[int]
    """``max_attention_memory`` for rollout (None: the default, 1 GiB)."""
    warmup: int
    repeats: int
    annotate_images: int
    annotate_batch: int
    annotate_workers: int
    baseline_images: int
    annotate_pixels: int
    test_paths: tuple[str, ...]
    tests_estimate_s: float
    tests_timeout_s: float
    budget_s: float


FULL = Plan(sizes=((224, 64), (512, 8), (1024, 1), (1024, 8)), depth=None, attention_budget=None, warmup=3,
            repeats=10, annotate_images=512, annotate_batch=64, annotate_workers=min(8, os.cpu_count() or 1),
            baseline_images=64, annotate_pixels=224, test_paths=("tests",), tests_estimate_s=60, tests_timeout_s=150,
            budget_s=270)
QUICK = Plan(sizes=((32, 1), (32, 2)), depth=1, attention_budget=150, warmup=1, repeats=2,
             annotate_images=4, annotate_batch=2, annotate_workers=0, baseline_images=2, annotate_pixels=48,
             test_paths=("tests/test_cuda.py",), tests_estimate_s=10, tests_timeout_s=150, budget_s=90)
"""Tiny sizes, one layer (N = 5); the attention budget puts batch 2 (200 bytes of records) on the factored path, as
batch 8 at N = 4097 is in the full plan, and batch 1 (100 bytes) on dense records, as it is there."""


class Skip(Exception):
    """An item that does not fit in the time left."""


class Report:
    """Everything measured so far; written (md + json) at the end, or by the watchdog."""

    def __init__(self, out: Path, mode: str, budget_s: float) -> None:
        self.out, self.mode = out, mode
        self.started = time.perf_counter()
        self.deadline = self.started + budget_s
        self.data: dict[str, Any] = {"mode": mode, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), "budget": {"limit_s": budget_s}, "environment": {}, "cuda_tests": None,
            "rollout": [], "record_paths": [], "annotate": [], "items": []}
        self.current: Optional[str] = None
        self.lock = threading.Lock()
        self.watchdog: Optional[threading.Timer] = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def run(self, name: str, estimate_s: float, action: Callable[[], Any]) -> Any:
        """``action()`` as item ``name``: skipped when ``estimate_s`` exceeds the time left, errors recorded."""
        item: dict[str, Any] = {"name": name, "estimate_s": round(estimate_s, 1)}
        started = time.perf_counter()
        self.current = name
        try:
            if estimate_s > self.remaining():
                raise Skip(f"estimated {estimate_s:.0f} s, {max(0.0, self.remaining()):.0f} s of the budget left")
            result = action()
            item["status"] = "ok"
        except Skip as skip:
            item.update(status="skipped", note=str(skip))
            result = None
        except Exception as error:  # noqa: BLE001 — an unattended run records every failure and goes on
            lines = str(error).strip().splitlines()
            item.update(status="error", note=f"{type(error).__name__}: {lines[0] if lines else ''}",
                        traceback=traceback.format_exc().splitlines()[-12:])
            result = None
            _free_device_memory()
        item["seconds"] = round(time.perf_counter() - started, 2)
        self.current = None
        with self.lock:
            self.data["items"].append(item)
        print(f"gpu_check: [{self.elapsed():5.0f} s] {name}: {item['status']} {item.get('note', '')}",
              file=sys.stderr, flush=True)
        return result

    def write(self) -> None:
        with self.lock:
            self.data["budget"]["elapsed_s"] = round(self.elapsed(), 1)
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=1) + "\n")
            (self.out / "gpu_check.md").write_text(wrapped_card(markdown(self.data)))

    def start_watchdog(self, grace_s: float) -> None:
        """Write what is done and end the process if the run is still going ``grace_s`` after the budget."""

        def expire() -> None:
            with self.lock:
                self.data["items"].append({"name": self.current or "(between items)", "status": "error",
                                           "note": f"watchdog: still running {grace_s:g} s after the budget; "
                                                   "the process was ended", "seconds": None, "estimate_s": None})
            self.write()
            print(f"gpu_check: error: item {self.current!r} hung; partial report in {self.out}", file=sys.stderr)
            os._exit(3)

        self.watchdog = threading.Timer(max(0.0, self.remaining()) + grace_s, expire)
        self.watchdog.daemon = True
        self.watchdog.start()


def _free_device_memory() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# -- environment ----------------------------------------------------------------------------------------------


def _command_output(command: list[str]) -> Optional[str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None


def environment(device: torch.device) -> dict[str, Any]:
    """Device name and versions for the report header."""
    info: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__, "timm": timm.__version__,
        "vitroll": vitroll.__version__,
        "commit": _command_output(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "cpu_cores": os.cpu_count(), "device_type": device.type,
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            device=properties.name, capability=f"{properties.major}.{properties.minor}",
            multiprocessors=properties.multi_processor_count, memory_gib=round(properties.total_memory / 2**30, 1),
            cuda_runtime=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
            driver=_command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32,
        )
    else:
        info.update(device=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    return info


# -- CUDA tests -----------------------------------------------------------------------------------------------


def cuda_tests(paths: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    """``pytest -m cuda`` on ``paths`` in a subprocess (this worktree's vitroll first on the path); counts from
    its JUnit XML."""
    with tempfile.TemporaryDirectory() as scratch:
        xml = Path(scratch) / "junit.xml"
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"}
        command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                   f"--junitxml={xml}", *paths]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=REPO, env=environ, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"pytest -m cuda did not finish in {timeout_s:.0f} s") from None
        seconds = time.perf_counter() - started
        if not xml.exists():
            raise RuntimeError(f"pytest -m cuda wrote no report (exit {done.returncode}): "
                               f"{(done.stdout + done.stderr).strip()[-300:]}")
        return junit_counts(ElementTree.parse(xml).getroot(), seconds, done.returncode)


def junit_counts(root: ElementTree.Element, seconds: float, returncode: int) -> dict[str, Any]:
    """Counts and failures from a JUnit XML root (``<testsuites>`` or ``<testsuite>``)."""
    cases = list(root.iter("testcase"))
    failures, skipped = [], 0
    for case in cases:
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            message = (problem.get("message") or "").strip().splitlines()
            failures.append(f"{case.get('classname')}::{case.get('name')}: {message[0] if message else ''}"[:300])
        elif case.find("skipped") is not None:
            skipped += 1
    return {"collected": len(cases), "passed": len(cases) - len(failures) - skipped, "failed": len(failures),
            "skipped": skipped, "seconds": round(seconds, 1), "exit_code": returncode, "failures": failures}


# -- rollout / forward ----------------------------------------------------------------------------------------


def forward_flops(depth: int, dim: int, tokens: int) -> float:
    """FLOPs of one image's forward through the blocks: 24·N·D² (projections, MLP) + 4·N²·D (attention) per layer."""
    return 4.0 * depth * tokens * dim * (6 * dim + tokens)


def build(name: str, pixels: int, depth: Optional[int], device: Optional[torch.device]) -> torch.nn.Module:
    """A random-init timm model for ``pixels``-px inputs (on the meta device for shapes only when ``device`` is
    None)."""
    options = {"img_size": pixels, **({"depth": depth} if depth else {})}
    if device is None:
        with torch.device("meta"):
            return timm.create_model(name, **options)
    torch.manual_seed(0)
    return timm.create_model(name, **options).eval().to(device)


def shape_of(model: torch.nn.Module) -> tuple[int, int, int]:
    """(layers, width, tokens) of a timm ViT."""
    return len(model.blocks), model.embed_dim, model.patch_embed.num_patches + model.num_prefix_tokens


def time_call(call: Callable[[], Any], device: torch.device) -> float:
    """Seconds of ``call()``: CUDA events around it on a GPU, ``perf_counter`` after synchronising otherwise."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def peak_extra_mib(call: Callable[[], Any], device: torch.device) -> Optional[float]:
    """Peak allocated memory of ``call()`` above what was allocated before it, MiB (None off CUDA)."""
    if device.type != "cuda":
        call()
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    call()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


class Rates:
    """Forward FLOP/s and rollout / forward ratio for estimates: assumed until measured."""

    def __init__(self, device: torch.device) -> None:
        self.flops = {precision: ASSUMED_FLOPS[(device.type, precision)] for precision in PRECISIONS}
        self.ratio = ASSUMED_ROLLOUT_RATIO

    def rollout_seconds(self, flops: float, precision: str, passes: int) -> float:
        return passes * (1 + self.ratio) * flops / self.flops[precision]

    def learn(self, row: dict[str, Any]) -> None:
        self.flops[row["precision"]] = row["forward_flops"] / row["forward_s"]
        self.ratio = max(1.0, row["ratio"])


def rollout_row(name: str, model: torch.nn.Module, batch: int, precision: str, plan: Plan,
                device: torch.device) -> dict[str, Any]:
    """Forward and rollout of one batch of random images timed side by side, with their peak memory."""
    pixels = model.patch_embed.img_size[0]
    layers, dim, tokens = shape_of(model)
    images = torch.randn(batch, 3, pixels, pixels, generator=torch.Generator().manual_seed(0)).to(device)

    def forward() -> None:
        with torch.no_grad(), bench_batch.autocast(device, precision):
            model(images)

    def explain() -> None:
        with bench_batch.autocast(device, precision):
            rollout(model, images, max_attention_memory=plan.attention_budget)

    for _ in range(plan.warmup):
        forward()
        explain()
    forward_peak, rollout_peak = peak_extra_mib(forward, device), peak_extra_mib(explain, device)
    forward_times, rollout_times = [], []
    for _ in range(plan.repeats):
        forward_times.append(time_call(forward, device))
        rollout_times.append(time_call(explain, device))
    dense_bytes = layers * batch * tokens * tokens * 4
    budget = plan.attention_budget or default_attention_budget(device)
    flops = forward_flops(layers, dim, tokens) * batch
    return {
        "model": name, "tokens": tokens, "pixels": pixels, "batch": batch, "precision": precision, "layers": layers,
        "recording": "factored" if dense_bytes > budget else dense_record_path(device, precision),
        "forward_s": min(forward_times), "rollout_s": min(rollout_times),
        "ratio": min(rollout_times) / min(forward_times),
        "median_ratio": statistics.median(rollout_times) / statistics.median(forward_times),
        "forward_flops": flops, "forward_tflops_per_s": flops / min(forward_times) / 1e12,
        "forward_peak_mib": forward_peak, "rollout_peak_mib": rollout_peak, "goal": GOALS.get(tokens),
    }


def dense_record_path(device: torch.device, precision: str) -> str:
    """Which kernel recorded the dense head-mean maps of a run just made on ``device`` in ``precision``."""
    if device.type not in recorder_module.RECORD_FROM_FACTORS_ON:
        return "blocked"
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    if False in [ok for (kind, kind_dtype, _), ok in factored_module._checked_kernels.items()
                 if (kind, kind_dtype) == (device.type, dtype)]:
        return "blocked (fused kernel's log-sum-exp refused)"
    return f"fused + {'Triton' if head_mean_module.triton_applies(device) else 'PyTorch'} head mean"


@contextlib.contextmanager
def record_path(path: str) -> Iterator[None]:
    """Rollout's dense record forced onto ``path``: "blocked", "fused + PyTorch" or "fused + Triton" head mean."""
    with contextlib.ExitStack() as stack:
        if path == "blocked":
            stack.enter_context(mock.patch.object(recorder_module, "RECORD_FROM_FACTORS_ON", frozenset()))
        else:
            everywhere = frozenset({"cuda", "cpu"})
            stack.enter_context(mock.patch.object(recorder_module, "RECORD_FROM_FACTORS_ON", everywhere))
            triton = path == "fused + Triton"
            stack.enter_context(mock.patch.object(head_mean_module, "triton_applies", lambda _device: triton))
        yield


def record_paths(device: torch.device) -> list[str]:
    """The dense record paths to compare on ``device`` (Triton's only on CUDA)."""
    triton = device.type == "cuda" and head_mean_module.triton is not None
    return ["blocked", "fused + PyTorch"] + (["fused + Triton"] if triton else [])


def record_path_sizes(plan: Plan) -> list[tuple[int, int]]:
    """(pixels, batch) of the plan's rows in :data:`RECORD_PATH_SIZES`, or its first row."""
    return [size for size in plan.sizes if size in RECORD_PATH_SIZES] or list(plan.sizes[:1])


def record_path_rows(report: Report, plan: Plan, device: torch.device, rates: Rates) -> None:
    """The dense record paths side by side on vit_base: rollout / forward with each, same model, same run."""
    passes = plan.warmup + plan.repeats + 1
    for pixels, batch in record_path_sizes(plan):
        model = report.run(f"build {MODELS[1]} at {pixels} px", 5.0,
                           lambda pixels=pixels: build(MODELS[1], pixels, plan.depth, device))
        for precision in PRECISIONS:
            for path in record_paths(device):
                def measure(path: str = path, precision: str = precision, model: Any = model,
                            batch: int = batch) -> dict[str, Any]:
                    if model is None:
                        raise RuntimeError("the model could not be built")
                    with record_path(path):
                        return {**rollout_row(MODELS[1], model, batch, precision, plan, device), "recording": path}

                shape = shape_of(build(MODELS[1], pixels, plan.depth, None))
                estimate = rates.rollout_seconds(forward_flops(*shape) * batch, precision, passes)
                row = report.run(f"record path {path} N={shape[2]} batch {batch} {precision}", estimate, measure)
                if row is not None:
                    report.data["record_paths"].append(row)
        model = None
        _free_device_memory()


def rollout_rows(report: Report, plan: Plan, device: torch.device, rates: Rates) -> None:
    """Every (model, size, precision) row of the rollout / forward table, each as its own item."""
    passes = plan.warmup + plan.repeats + 1
    for name in MODELS:
        for pixels in sorted({pixels for pixels, _ in plan.sizes}):
            holder: dict[str, torch.nn.Module] = {}

            def make(name: str = name, pixels: int = pixels) -> None:
                holder["model"] = build(name, pixels, plan.depth, device)

            report.run(f"build {name} at {pixels} px", 5.0, make)
            for batch in [b for p, b in plan.sizes if p == pixels]:
                for precision in PRECISIONS:
                    def measure(batch: int = batch, precision: str = precision) -> dict[str, Any]:
                        if "model" not in holder:
                            raise RuntimeError("the model could not be built")
                        return rollout_row(name, holder["model"], batch, precision, plan, device)

                    shape = shape_of(build(name, pixels, plan.depth, None))
                    estimate = rates.rollout_seconds(forward_flops(*shape) * batch, precision, passes)
                    row = report.run(f"rollout {name} N={shape[2]} batch {batch} {precision}", estimate, measure)
                    if row is not None:
                        rates.learn(row)
                        report.data["rollout"].append(row)
                        print(f"gpu_check:        rollout / forward {row['ratio']:.2f}, forward "
                              f"{row['forward_s'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
            holder.clear()
            _free_device_memory()


# -- annotate -------------------------------------------------------------------------------------------------


def loader_workers(wanted: int) -> int:
    """``wanted`` decoding workers, or none where /dev/shm cannot hold their batches in flight (containers often
    mount 64 MiB; a worker's batch then dies with a bus error)."""
    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError:
        return wanted
    return wanted if free >= 2 * 2**30 else 0


def annotate_row(plan: Plan, precision: str, device: torch.device) -> dict[str, Any]:
    model = build(MODELS[0], plan.annotate_pixels, plan.depth, device)
    workers = loader_workers(plan.annotate_workers)
    with tempfile.TemporaryDirectory() as scratch:
        speeds = bench_batch.measure(model, Path(scratch), plan.annotate_images, plan.annotate_batch, workers,
                                     precision, plan.baseline_images)
        speeds["annotate_two_writers"] = bench_batch.vitroll_annotate(
            model, Path(scratch) / "in", Path(scratch) / "out-two-writers", plan.annotate_batch, workers, precision,
            writer_threads=2)
    return {"model": MODELS[0], "pixels": plan.annotate_pixels, "precision": precision, "images": plan.annotate_images,
            "batch": plan.annotate_batch, "workers": workers, "writer_threads": AnnotateOptions().writer_threads,
            "baseline_images": plan.baseline_images,
            **{f"{key}_images_per_s": value for key, value in speeds.items()},
            "annotate_over_forward": speeds["annotate"] / speeds["forward"],
            "annotate_over_per_image": speeds["annotate"] / speeds["per_image"]}


def annotate_seconds(plan: Plan, rates: Rates, precision: str, device: torch.device) -> float:
    """Decode + forward + render for the plain forward, annotate, baseline and warm-up passes, plus start-up."""
    shape = shape_of(build(MODELS[0], plan.annotate_pixels, plan.depth, None))
    compute = forward_flops(*shape) / rates.flops[precision] * rates.ratio
    per_image_io = 2e-3 if device.type == "cuda" else 2e-2  # decode, overlay, PNG per image
    images = 4 * plan.annotate_images + 2 * plan.annotate_batch + 2 * plan.baseline_images
    return 5.0 + images * (compute + per_image_io)


# -- report ---------------------------------------------------------------------------------------------------


def _number(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def rollout_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines of a rollout / forward table."""
    lines = [
        "| model | N | px | batch | precision | recording | forward ms | rollout ms | rollout / forward (medians) "
        "| goal | forward TFLOP/s | forward peak MiB | rollout peak MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        goal = "–" if row["goal"] is None else f"≤ {row['goal']} {'met' if row['ratio'] <= row['goal'] else 'missed'}"
        lines.append(
            f"| {row['model']} | {row['tokens']} | {row['pixels']} | {row['batch']} | {row['precision']} "
            f"| {row['recording']} | {row['forward_s'] * 1e3:.2f} | {row['rollout_s'] * 1e3:.2f} "
            f"| {row['ratio']:.2f} ({row['median_ratio']:.2f}) | {goal} | {row['forward_tflops_per_s']:.3f} "
            f"| {_number(row['forward_peak_mib'], 0)} | {_number(row['rollout_peak_mib'], 0)} |")
    return lines


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    lines = [
        "# GPU check", "",
        f"`scripts/gpu_check.py` ({data['mode']} run, {data['date']}). Random-init timm models; every number below "
        "comes from this one run.", "",
        "## Environment", "", "| | |", "|---|---|",
    ]
    for key, value in env.items():
        lines.append(f"| {key} | {value} |")
    budget = data["budget"]
    lines += [f"| budget | {budget['limit_s']:.0f} s; estimated {_number(budget.get('estimate_s'), 0)} s; "
              f"elapsed {_number(budget.get('elapsed_s'), 0)} s |", ""]

    lines += ["## CUDA tests (`pytest -m cuda`)", ""]
    tests = data["cuda_tests"]
    if tests is None:
        lines.append("Not run (see Items).")
    else:
        lines.append(f"{tests['collected']} collected: {tests['passed']} passed, {tests['failed']} failed, "
                     f"{tests['skipped']} skipped, in {tests['seconds']} s (pytest exit {tests['exit_code']}).")
        lines += [f"- {failure}" for failure in tests["failures"]]
    lines.append("")

    lines += [
        "## Rollout / forward", "",
        "Forward and rollout alternate after warm-up; times are the fastest of the repeats (the ratio of medians in "
        "brackets). Peak MiB: allocated above the resident model and input. Goal: issue 24's rollout / forward bound.",
        "",
    ] + rollout_table(data["rollout"])
    lines += [
        "", "## Dense record paths side by side", "",
        "The same rows for vit_base with rollout's dense head-mean record forced onto each kernel in turn: the "
        "blocked kernel (per-head float32 probabilities, what the CPU uses), or the model's fused attention kernel "
        "with the head mean computed from its factors (``vitroll.capture.head_mean``) in PyTorch or in Triton.", "",
    ] + rollout_table(data["record_paths"])
    lines.append("")

    lines += [
        "## Annotate", "",
        "Images/s on generated JPEGs: (a) the plain forward over annotate's DataLoader; (b) annotate end to end "
        "(rollout, overlays, heatmaps, manifest) with its default writer threads; (b2) the same with 2 writer "
        "threads (the default before); (c) the per-image baseline (vit-explain style, float32); (d) the model alone "
        "at batch 1. Goals: b/a ≥ 0.8, b/c ≥ 3.", "",
        "| model | px | precision | images | batch | workers | writer threads | (a) forward | (b) annotate "
        "| (b2) 2 writers | (c) per-image | (d) batch 1 | b/a | b/c |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["annotate"]:
        lines.append(
            f"| {row['model']} | {row['pixels']} | {row['precision']} | {row['images']} | {row['batch']} "
            f"| {row['workers']} | {row['writer_threads']} | {row['forward_images_per_s']:.1f} "
            f"| {row['annotate_images_per_s']:.1f} | {row['annotate_two_writers_images_per_s']:.1f} "
            f"| {row['per_image_images_per_s']:.1f} | {row['single_images_per_s']:.1f} "
            f"| {row['annotate_over_forward']:.2f} | {row['annotate_over_per_image']:.2f} |")
    lines.append("")

    lines += ["## Items", "", "| item | status | seconds | estimate s | note |", "|---|---|---|---|---|"]
    for item in data["items"]:
        lines.append(f"| {item['name']} | {item['status']} | {_number(item['seconds'], 1)} "
                     f"| {_number(item['estimate_s'], 1)} | {item.get('note', '')} |")
    return "\n".join(lines) + "\n"


# -- main -----------------------------------------------------------------------------------------------------


def resolve(args: argparse.Namespace) -> tuple[torch.device, Plan, Path]:
    """Device, plan and output folder; a ``ValueError`` for a combination that must not run."""
    cuda = torch.cuda.is_available()
    if args.device == "auto":
        args.device = "cuda" if cuda else "cpu"
    device = torch.device(args.device)
    if device.type == "cuda" and not cuda:
        raise ValueError("no CUDA device is available; run --device cpu --quick --out DIR for the smoke run")
    if device.type == "cuda" and device.index is None:  # torch.cuda.set_device needs the index
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type != "cuda" and not args.quick:
        raise ValueError("the full check is sized for a GPU and would overwrite docs/ with CPU numbers; "
                         "use --device cpu --quick --out DIR")
    plan = QUICK if args.quick else FULL
    if args.budget is not None:
        plan = Plan(**{**plan.__dict__, "budget_s": args.budget})
    if args.out is not None:
        out = Path(args.out)
    elif args.quick:
        out = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    else:
        out = REPO / "docs"
    if args.quick and out.resolve() == (REPO / "docs").resolve():
        raise ValueError("the quick run's numbers must not replace docs/gpu_check.md; give another --out")
    return device, plan, out


def plan_estimate(plan: Plan, device: torch.device, rates: Rates) -> float:
    """Seconds the whole plan should take, from FLOPs at the assumed rates (see the module docstring)."""
    passes = plan.warmup + plan.repeats + 1
    seconds = 15.0 + plan.tests_estimate_s  # start-up and CUDA tests
    for name in MODELS:
        for pixels, batch in plan.sizes:
            flops = forward_flops(*shape_of(build(name, pixels, plan.depth, None))) * batch
            seconds += 2.0 + sum(rates.rollout_seconds(flops, precision, passes) for precision in PRECISIONS)
    for pixels, batch in record_path_sizes(plan):
        flops = forward_flops(*shape_of(build(MODELS[1], pixels, plan.depth, None))) * batch
        seconds += 2.0 + len(record_paths(device)) * sum(rates.rollout_seconds(flops, precision, passes)
                                                         for precision in PRECISIONS)
    return seconds + sum(annotate_seconds(plan, rates, precision, device) for precision in PRECISIONS)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cuda:1, cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the CPU smoke run")
    parser.add_argument("--out",
                        help="folder for gpu_check.md / .json (default docs/; a temporary folder with --quick)")
    parser.add_argument("--budget", type=float, help="seconds for the whole run (default 270; 90 with --quick)")
    args = parser.parse_args(argv)
    try:
        device, plan, out = resolve(args)
    except ValueError as error:
        print(f"gpu_check: error: {error}", file=sys.stderr)
        return 2
    if device.type == "cuda":
        torch.cuda.set_device(device)
    report = Report(out, "quick" if args.quick else "full", plan.budget_s)
    threads = torch.get_num_threads()
    if device.type == "cpu":  # tiny sizes: more threads only spin against each other and any other load
        torch.set_num_threads(1)
    report.start_watchdog(WATCHDOG_GRACE_S)
    try:
        run_plan(report, plan, device)
    finally:  # main() may run inside a longer process (the smoke test)
        report.watchdog.cancel()
        torch.set_num_threads(threads)
    report.write()
    print(markdown(report.data))
    tests = report.data["cuda_tests"]
    failed = any(item["status"] == "error" for item in report.data["items"]) or bool(tests and tests["failed"])
    return 1 if failed else 0


def run_plan(report: Report, plan: Plan, device: torch.device) -> None:
    """Every item of the plan, in order, into ``report``."""
    rates = Rates(device)
    report.data["budget"]["estimate_s"] = round(plan_estimate(plan, device, rates), 1)
    print(f"gpu_check: {report.mode} run on {device}, budget {plan.budget_s:.0f} s, estimate "
          f"{report.data['budget']['estimate_s']:.0f} s, writing to {report.out}", file=sys.stderr, flush=True)
    report.data["environment"] = report.run("environment", 1.0, lambda: environment(device)) or {}
    report.data["cuda_tests"] = report.run("pytest -m cuda", plan.tests_estimate_s,
                                           lambda: cuda_tests(plan.test_paths, min(plan.tests_timeout_s,
                                                                                   max(1.0, report.remaining()))))
    rollout_rows(report, plan, device, rates)
    record_path_rows(report, plan, device, rates)
    for precision in PRECISIONS:
        row = report.run(f"annotate {precision}", annotate_seconds(plan, rates, precision, device),
                         lambda precision=precision: annotate_row(plan, precision, device))
        if row is not None:
            report.data["annotate"].append(row)


if __name__ == "__main__":
    sys.exit(main())
