"""Page load of an annotate gallery with many rows, in headless Chromium (Debian's, through Playwright).

Writes a gallery of N synthetic manifest rows (all pointing at a handful of small overlays) and times, in one run per
size, ``write_gallery`` and the browser from navigation to the first page of cards rendered. Prints a table.

    python scripts/bench_gallery.py            # 10^3, 10^4, 10^5 rows
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from playwright.sync_api import sync_playwright

from vitroll.pipelines.gallery import write_gallery


def synthetic_rows(out_dir: Path, count: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    (out_dir / "overlays").mkdir(parents=True, exist_ok=True)
    for index in range(8):
        Image.fromarray(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)).save(out_dir / "overlays" / f"{index}.png")
    classes = [f"class_{index}" for index in range(20)]
    return [{"path": f"image_{index:06d}.jpg", "status": "ok" if index % 50 else "error",
             "error": "" if index % 50 else "not an image", "top1_name": classes[index % 20],
             "top1_probability": float(rng.random()), "entropy": float(rng.random()), "top10_mass": float(rng.random()),
             "agreement": None, "peak_x": int(rng.integers(128)), "peak_y": int(rng.integers(96)), "width": 128,
             "height": 96, "overlay": f"overlays/{index % 8}.png", "heatmap": None, "figure": None}
            for index in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    print("| rows | write_gallery s | rows.js MB | page load to first cards s |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for count in args.rows:
            out_dir = Path(scratch) / str(count)
            rows = synthetic_rows(out_dir, count)
            start = time.perf_counter()
            write_gallery(out_dir, rows)
            written = time.perf_counter() - start
            page = browser.new_page()
            start = time.perf_counter()
            page.goto((out_dir / "index.html").as_uri())
            page.wait_for_selector(".card")
            loaded = time.perf_counter() - start
            page.close()
            size = (out_dir / "gallery" / "rows.js").stat().st_size / 1e6
            print(f"| {count} | {written:.2f} | {size:.1f} | {loaded:.2f} |")
        browser.close()


if __name__ == "__main__":
    main()
