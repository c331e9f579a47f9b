"""scripts/gpu_check.py on the CPU: the quick run goes through every item of the GPU check and writes its report
(the CI smoke test of a script that is meant to run unattended on a GPU)."""

from __future__ import annotations

import importlib
import json
import math
import shutil
import sys
import textwrap
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
SECTIONS = ("## Environment", "## CUDA tests (`pytest -m cuda`)", "## Rollout / forward",
            "## Dense record paths side by side", "## Annotate", "## Items")
MODELS = ("vit_small_patch16_224", "vit_base_patch16_224")
CPU_RECORD_PATHS = ("blocked", "fused + PyTorch")
"""Triton's record path is compared on CUDA only."""

# the vit-explain-style baseline divides by the map's maximum, which is 0 on one-layer models of 3×3 patches
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")


@pytest.fixture(scope="module")
def gpu_check():
    sys.path.insert(0, str(SCRIPTS))  # as when run as a script: gpu_check imports bench_batch from beside it
    try:
        yield importlib.import_module("gpu_check")
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture(scope="module")
def quick_run(gpu_check, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    code = gpu_check.main(["--device", "cpu", "--quick", "--out", str(out), "--budget", "600"])
    return code, json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_quick_run_completes_every_item(quick_run):
    code, data, _ = quick_run
    assert code == 0
    names = [item["name"] for item in data["items"]]
    assert names == ["environment", "pytest -m cuda",
                     *[name for model in MODELS for name in [f"build {model} at 32 px", *[
                         f"rollout {model} N=5 batch {batch} {precision}" for batch in (1, 2)
                         for precision in ("fp32", "bf16")]]],
                     f"build {MODELS[1]} at 32 px",
                     *[f"record path {path} N=5 batch 1 {precision}" for precision in ("fp32", "bf16")
                       for path in CPU_RECORD_PATHS],
                     "annotate fp32", "annotate bf16"]
    assert {item["status"] for item in data["items"]} == {"ok"}
    assert all(_positive(item["seconds"]) or item["seconds"] == 0 for item in data["items"])
    assert _positive(data["budget"]["estimate_s"]) and _positive(data["budget"]["elapsed_s"])


def test_quick_run_writes_every_section_with_finite_positive_numbers(quick_run):
    _, data, markdown = quick_run
    for heading in SECTIONS:
        assert heading in markdown
    assert data["mode"] == "quick" and data["environment"]["torch"] == torch.__version__
    tests = data["cuda_tests"]
    assert tests["collected"] > 0 and tests["failed"] == 0
    if not torch.cuda.is_available():
        assert tests["skipped"] == tests["collected"]
    assert f"{tests['collected']} collected: {tests['passed']} passed, 0 failed" in markdown

    assert [(row["model"], row["batch"], row["precision"], row["recording"]) for row in data["rollout"]] == [
        (model, batch, precision, "blocked" if batch == 1 else "factored")
        for model in MODELS for batch in (1, 2) for precision in ("fp32", "bf16")]
    assert [(row["model"], row["batch"], row["precision"], row["recording"]) for row in data["record_paths"]] == [
        (MODELS[1], 1, precision, path) for precision in ("fp32", "bf16") for path in CPU_RECORD_PATHS]
    for row in data["rollout"] + data["record_paths"]:
        assert row["tokens"] == 5 and row["pixels"] == 32 and row["goal"] is None
        for key in ("forward_s", "rollout_s", "ratio", "median_ratio", "forward_flops", "forward_tflops_per_s"):
            assert _positive(row[key]), (key, row)
        assert row["forward_peak_mib"] is None and row["rollout_peak_mib"] is None  # measured on CUDA only
    assert markdown.count("| vit_small_patch16_224 | 5 | 32 |") == 4
    assert markdown.count("| vit_base_patch16_224 | 5 | 32 |") == 4 + 4

    assert [row["precision"] for row in data["annotate"]] == ["fp32", "bf16"]
    for row in data["annotate"]:
        for key in ("forward_images_per_s", "annotate_images_per_s", "annotate_two_writers_images_per_s",
                    "per_image_images_per_s", "single_images_per_s", "annotate_over_forward",
                    "annotate_over_per_image", "writer_threads"):
            assert _positive(row[key]), (key, row)
    assert markdown.count("| vit_small_patch16_224 | 48 |") == 2


def test_flop_count_of_vit_small_at_224_px(gpu_check):
    # 12 layers of 24·N·D² + 4·N²·D at N = 197, D = 384: the published 4.6 GMACs of vit_small_patch16_224
    assert gpu_check.forward_flops(12, 384, 197) == pytest.approx(9.08e9, rel=1e-3)


def test_quick_run_refuses_to_replace_the_committed_report(gpu_check, capsys):
    assert gpu_check.main(["--device", "cpu", "--quick", "--out", str(REPO / "docs")]) == 2
    assert capsys.readouterr().err == (
        "gpu_check: error: the quick run's numbers must not replace docs/gpu_check.md; give another --out\n")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_full_run_needs_cuda(gpu_check, capsys):
    assert gpu_check.main([]) == 2
    assert capsys.readouterr().err == (
        "gpu_check: error: the full check is sized for a GPU and would overwrite docs/ with CPU numbers; "
        "use --device cpu --quick --out DIR\n")


def test_an_item_that_fails_or_does_not_fit_is_recorded_and_the_run_goes_on(gpu_check, tmp_path):
    report = gpu_check.Report(tmp_path, "quick", budget_s=30)

    def broken() -> None:
        raise ValueError("no such kernel\nsecond line")

    assert report.run("broken", 1.0, broken) is None
    assert report.run("too long", 31.0, lambda: 1) is None
    assert report.run("fine", 1.0, lambda: 7) == 7
    broken_item, long_item, fine_item = report.data["items"]
    assert (broken_item["status"], broken_item["note"]) == ("error", "ValueError: no such kernel")
    assert "raise ValueError" in "\n".join(broken_item["traceback"])
    assert long_item["status"] == "skipped" and long_item["note"].startswith("estimated 31 s, ")
    assert fine_item["status"] == "ok"
    report.write()
    assert "| broken | error |" in (tmp_path / "gpu_check.md").read_text()


def test_junit_counts_list_failures_and_errors(gpu_check):
    root = ElementTree.fromstring(textwrap.dedent("""\
        <testsuites><testsuite>
          <testcase classname="tests.test_cuda" name="test_a"/>
          <testcase classname="tests.test_cuda" name="test_b"><failure message="assert 2 &lt; 1&#10;more"/></testcase>
          <testcase classname="tests.test_cuda" name="test_c"><error message="CUDA error"/></testcase>
          <testcase classname="tests.test_cuda" name="test_d"><skipped message="needs a CUDA device"/></testcase>
        </testsuite></testsuites>"""))
    counts = gpu_check.junit_counts(root, 1.5, 1)
    assert counts == {"collected": 4, "passed": 1, "failed": 2, "skipped": 1, "seconds": 1.5, "exit_code": 1,
                      "failures": ["tests.test_cuda::test_b: assert 2 < 1", "tests.test_cuda::test_c: CUDA error"]}


def test_watchdog_writes_the_report_and_ends_a_hung_run(gpu_check, tmp_path, monkeypatch, capsys):
    ended = threading.Event()
    exit_codes = []

    def end_process(code: int) -> None:  # the real os._exit would end pytest too
        exit_codes.append(code)
        ended.set()

    monkeypatch.setattr(gpu_check.os, "_exit", end_process)
    report = gpu_check.Report(tmp_path, "quick", budget_s=1.0)
    report.start_watchdog(0.0)
    report.run("hangs", 0.0, lambda: ended.wait(30))
    assert exit_codes == [3]
    assert "gpu_check: error: item 'hangs' hung; partial report in " in capsys.readouterr().err
    items = json.loads((tmp_path / "gpu_check.json").read_text())["items"]
    assert items == [{"name": "hangs", "status": "error", "note": "watchdog: still running 0 s after the budget; "
                      "the process was ended", "seconds": None, "estimate_s": None}]


@pytest.mark.parametrize(("free_bytes", "workers"), [(64 * 2**20, 0), (2 * 2**30, 8)])
def test_loader_workers_only_where_shared_memory_holds_their_batches(gpu_check, monkeypatch, free_bytes, workers):
    monkeypatch.setattr(gpu_check.shutil, "disk_usage",
                        lambda _path: shutil._ntuple_diskusage(free_bytes, 0, free_bytes))
    assert gpu_check.loader_workers(8) == workers
