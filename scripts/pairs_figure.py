"""Draw docs/image_text_occlusion.png: held-out two-shape images, each with chefer's and occlusion's maps for the
prompt naming one shape and for the same template naming the other.

    python scripts/pairs_figure.py                     # 4 images of the held-out split (seed 3)
    python scripts/pairs_figure.py --count 6 --out fig.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib.figure import Figure
from PIL import Image

import vitroll
from vitroll.maps import to_original
from vitroll.pipelines.evaluate_pairs import pair_images
from vitroll.preprocess import Preprocessing

METHODS = {"chefer": {}, "occlusion": {"window": 3}}
"""The methods drawn, with their options (occlusion's window as in the README's table)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("docs/image_text_occlusion.png"))
    args = parser.parse_args(argv)

    model = vitroll.load_model("vitroll-clip-shapes")
    preprocessing = Preprocessing.from_model(model)
    columns = 1 + 2 * len(METHODS)
    fig = Figure(figsize=(2.2 * columns, 2.3 * args.count), layout="constrained")
    axes = fig.subplots(args.count, columns, squeeze=False)
    for row, item in zip(axes, pair_images(args.count)):
        tensor, (geometry,) = preprocessing.batch([Image.fromarray(item.image)])
        prompts = [item.prompt, item.other_prompt]
        row[0].imshow(item.image)
        row[0].set_title("image", fontsize=9)
        column = 1
        for method, options in METHODS.items():
            maps = vitroll.image_text_maps(model, tensor, prompts, method=method, **options)[0].numpy()
            for prompt, grid_map in zip(prompts, maps):
                row[column].imshow(vitroll.overlay(item.image, to_original(grid_map, geometry), alpha=0.55))
                row[column].set_title(f"{method}: “{prompt}”", fontsize=9)
                column += 1
        for axis in row:
            axis.axis("off")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
