"""Attribution baselines that ignore attention: Integrated Gradients and GradientSHAP, through captum.

They attribute the target class's logit to input pixels; the absolute attribution, summed over colour
channels and averaged over each patch, becomes a (B, h, w) map on the same patch grid as every attention
method, so the same pipelines, metrics and comparisons apply. captum is an optional extra:
``pip install "vitroll[attr]"``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitroll.errors import UnsupportedModelError, VitrollError
from vitroll.methods.image_batch import Images
from vitroll.methods.base import Saliency, class_logits, eval_mode, predict
from vitroll.methods.registry import register_method
from vitroll.methods.gradients import TargetClass, resolve_targets

Sign = Literal["absolute", "positive", "signed"]


def _captum_attr():
    try:
        import captum.attr
    except ImportError:
        raise VitrollError('attribution methods need captum: pip install "vitroll[attr]"') from None
    return captum.attr


def pixels_to_grid(attributions: torch.Tensor, grid: tuple[int, int], sign: Sign) -> torch.Tensor:
    """Pixel attributions (B, C, H, W) → patch-grid map (B, h, w): |a|, a⁺ or a (``sign``) summed over
    channels, averaged per patch."""
    transforms = {"absolute": torch.abs, "positive": lambda a: a.clamp(min=0), "signed": lambda a: a}
    if sign not in transforms:
        raise ValueError(f"sign must be one of {', '.join(transforms)}; got {sign!r}")
    per_pixel = transforms[sign](attributions)
    return F.adaptive_avg_pool2d(per_pixel.sum(dim=1, keepdim=True).float(), grid).squeeze(1)


def _attribute(model: nn.Module, images: Images, target_class: TargetClass, sign: Sign, explain) -> Saliency:
    """Shared frame: predictions, targets, captum call ``explain(inputs, targets)``, pooling to the grid."""
    images, logits, layout = predict(model, images, class_logits)
    if layout.grid is None:
        raise UnsupportedModelError(f"{type(model).__name__} takes tokens: integrated_gradients and gradient_shap "
                                    "attribute pixels and do not explain text models yet")
    grid = layout.grid
    targets = resolve_targets(logits, target_class)
    with eval_mode(model), torch.enable_grad():
        attributions = explain(images, targets)
    return Saliency(pixels_to_grid(attributions.detach(), grid, sign), logits)


@register_method("integrated_gradients", needs_gradients=True, requires=("captum",))
def integrated_gradients(
    model: nn.Module,
    images: Images,
    *,
    target_class: TargetClass = None,
    steps: int = 32,
    sign: Sign = "absolute",
) -> Saliency:
    """Integrated Gradients (Sundararajan et al. 2017) from a zero baseline (the dataset-mean colour after
    normalisation), ``steps`` Riemann steps; maps (B, h, w), float32 on the model's device. Costs ``steps``
    forward + backward passes. ``images`` as for every method (:data:`~vitroll.methods.image_batch.Images`)."""
    attr = _captum_attr()
    method = attr.IntegratedGradients(lambda inputs: class_logits(model, inputs))
    return _attribute(model, images, target_class, sign, lambda x, t: method.attribute(
        x, baselines=torch.zeros_like(x), target=t, n_steps=steps, internal_batch_size=max(len(x), 8) * 4))


@register_method("gradient_shap", needs_gradients=True, requires=("captum",))
def gradient_shap(
    model: nn.Module,
    images: Images,
    *,
    target_class: TargetClass = None,
    samples: int = 16,
    noise: float = 0.1,
    seed: int = 0,
    sign: Sign = "absolute",
) -> Saliency:
    """GradientSHAP (Lundberg & Lee 2017, captum's estimator): expected gradients × (input − baseline) over
    ``samples`` random points between the input (with Gaussian ``noise``) and baselines drawn from a black,
    a mean-grey and a blurred copy; maps (B, h, w), float32 on the model's device. Reproducible for a given
    ``seed``. ``images`` as for every method (:data:`~vitroll.methods.image_batch.Images`)."""
    attr = _captum_attr()
    method = attr.GradientShap(lambda inputs: class_logits(model, inputs))

    def explain(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        blurred = F.avg_pool2d(x, 9, stride=1, padding=4, count_include_pad=False)
        baselines = torch.cat([torch.zeros_like(x[:1]), x.mean(dim=(0, 2, 3), keepdim=True).expand_as(x[:1]),
                               blurred.mean(dim=0, keepdim=True)])
        numpy_state = np.random.get_state()  # captum draws the baselines with NumPy, the noise with torch
        try:
            np.random.seed(seed)
            with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
                torch.manual_seed(seed)
                return method.attribute(x, baselines=baselines, target=targets, n_samples=samples, stdevs=noise)
        finally:
            np.random.set_state(numpy_state)

    return _attribute(model, images, target_class, sign, explain)
