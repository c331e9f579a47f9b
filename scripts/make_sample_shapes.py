"""Write the testbed sample images shipped in sample_images/: the first held-out image (seed 3) of each class,
enlarged 4× (nearest neighbour) so overlays are easy to see, with its target mask beside it (NAME_mask.png); and
the first held-out two-shape image (:mod:`vitroll.testbed.shape_pairs`, seed 3) as two_shapes.png, enlarged alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from vitroll.testbed import CLASSES, sample
from vitroll.testbed import shape_pairs

OUT = Path(__file__).resolve().parents[1] / "sample_images"
SCALE = 4


def main() -> None:
    found: dict[int, int] = {}
    index = 0
    while len(found) < len(CLASSES):
        label = sample(3, index).label
        found.setdefault(label, index)
        index += 1
    for label, index in sorted(found.items()):
        item = sample(3, index)
        name = f"shapes_{CLASSES[label]}"
        big = Image.fromarray(item.image).resize((64 * SCALE, 64 * SCALE), Image.NEAREST)
        big.save(OUT / f"{name}.png")
        mask = Image.fromarray(item.mask.astype(np.uint8) * 255).resize((64 * SCALE, 64 * SCALE), Image.NEAREST)
        mask.save(OUT / f"{name}_mask.png")
        print(f"{name}.png: seed 3, image {index}")
    pair = shape_pairs.sample(3, 0)
    Image.fromarray(pair.image).resize((64 * SCALE, 64 * SCALE), Image.NEAREST).save(OUT / "two_shapes.png")
    print("two_shapes.png: two-shape split seed 3, image 0")


if __name__ == "__main__":
    main()
