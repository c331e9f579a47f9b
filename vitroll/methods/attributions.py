"""Attribution baselines that ignore attention: Integrated Gradients and GradientSHAP (through captum), and occlusion.

They attribute the target class's logit to the model's continuous inputs. For a vision model these are the
pixels: the attribution, summed over colour channels and averaged over each patch, becomes a (B, h, w) map on the
same patch grid as every attention method. For a text model (token ids have no gradient) they are the word
embeddings (B, L, D), the output of ``model.get_input_embeddings()`` — position and segment embeddings are added
after it and stay as they are: the attribution summed over the embedding dimension is one score per token (B, L),
padded positions 0. So the same pipelines, metrics and comparisons apply. captum is an optional extra:
``pip install "vitroll[attr]"``; occlusion, which only runs the model forward, needs nothing more.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Callable, Literal, NamedTuple, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitroll.capture import TokenLayout
from vitroll.errors import InputValueError, OptionValueError, VitrollError
from vitroll.io.text import TokenBatch
from vitroll.methods.base import Saliency, class_logits, eval_mode, predict
from vitroll.methods.gradients import TargetClass, refuse_inference_mode, resolve_targets
from vitroll.methods.inputs import Inputs
from vitroll.methods.map_checks import UNTRAINED, warn_constant_maps
from vitroll.methods.registry import register_method
from vitroll.wording import method_option

Sign = Literal["absolute", "positive", "signed"]

_SIGNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "absolute": torch.abs, "positive": lambda a: a.clamp(min=0), "signed": lambda a: a}


def _captum_attr():
    try:
        import captum.attr
    except ImportError:
        raise VitrollError('attribution methods need captum: pip install "vitroll[attr]"') from None
    return captum.attr


def _check_at_least_one(**counts: int) -> None:
    for name, count in counts.items():
        if count < 1:
            raise OptionValueError(f"{method_option(name)} must be at least 1; got {count}")


def _signed(attributions: torch.Tensor, sign: Sign) -> torch.Tensor:
    if sign not in _SIGNS:
        raise OptionValueError(f"{method_option('sign')} must be one of {', '.join(_SIGNS)}; got {sign!r}")
    return _SIGNS[sign](attributions)


def pixels_to_grid(attributions: torch.Tensor, layout: TokenLayout, sign: Sign) -> torch.Tensor:
    """Pixel attributions (B, C, H, W) → patch-grid map (B, h, w) of ``layout``: |a|, a⁺ or a (``sign``) summed over
    channels, averaged over each patch's pixels (of a patch partly padding, over its pixels of the image only)."""
    summed = layout.padded(_signed(attributions, sign).sum(dim=1, keepdim=True).float())
    share_of_image = F.adaptive_avg_pool2d(layout.padded(torch.ones_like(attributions[:1, :1], dtype=torch.float)),
                                           layout.grid)
    return (F.adaptive_avg_pool2d(summed, layout.grid) / share_of_image).squeeze(1)


def embeddings_to_tokens(attributions: torch.Tensor, real: torch.Tensor, sign: Sign) -> torch.Tensor:
    """Embedding attributions (B, L, D) → token scores (B, L): summed over the embedding dimension (a token's
    share of the score difference), then |s|, s⁺ or s (``sign``); padded positions (``real`` False) exactly 0."""
    return torch.where(real, _signed(attributions.sum(dim=-1).float(), sign), 0.0)


class AttributionSpace(NamedTuple):
    """Where an attribution method moves: the inputs it attributes to and the forward from them to class scores."""

    inputs: torch.Tensor
    """(B, C, H, W) pixels, or (B, L, D) word embeddings."""
    forward: Callable[..., torch.Tensor]
    """``forward(inputs, *extra)`` → class scores (B, num_classes), for any batch of rows of ``inputs``."""
    extra: tuple[torch.Tensor, ...]
    """Per-row tensors the forward also needs (token ids, mask, explained position, and segment ids when the
    texts have them), which captum repeats with
    the rows it builds."""
    baseline: torch.Tensor
    """(1, …) the point Integrated Gradients starts from, broadcast over the batch."""
    baselines: torch.Tensor
    """(B, K, …) the baselines GradientSHAP draws from for each row, from that row alone."""
    scale: torch.Tensor
    """(B,) each row's typical magnitude, which GradientSHAP's ``noise`` is relative to."""
    to_maps: Callable[[torch.Tensor, Sign], torch.Tensor]
    """Attributions shaped as ``inputs`` → maps (B, h, w) or token scores (B, L)."""
    cells: tuple[int, ...]
    """What occlusion hides a piece of at a time: the patch grid (h, w), or the L token positions (L,)."""
    real_cells: torch.Tensor
    """(B, *cells) bool: the cells of each row that hold its input (every patch; a text's real tokens)."""
    hide: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``hide(row, masks)``: one row of ``inputs`` (1, …) once per mask of ``masks`` (P, *cells) bool, the masked
    cells set to the baseline → (P, …)."""
    cells_to_maps: Callable[[torch.Tensor, Sign], torch.Tensor]
    """One score per cell (B, *cells) → maps (B, h, w) or token scores (B, L)."""
    own_tokens: Optional[torch.Tensor] = None
    """(B, L) bool, texts only: each row's real tokens, the only ones GradientSHAP draws noise for, so that a text's
    draws do not depend on the length its batch pads it to; None for images (every pixel is the image's)."""


def pixel_space(model: nn.Module, images: torch.Tensor, layout: TokenLayout) -> AttributionSpace:
    """Pixels from the zero baseline (the dataset-mean colour after normalisation); GradientSHAP also draws each
    image's own mean-grey and blurred copies."""
    black = torch.zeros_like(images[:1])
    grey = images.mean(dim=(2, 3), keepdim=True).expand_as(images)
    blurred = F.avg_pool2d(images, 9, stride=1, padding=4, count_include_pad=False)
    # captum's GradientSHAP mixes the inputs with float32 draws: back to the model's dtype before its first layer
    return AttributionSpace(images, lambda inputs: class_logits(model, inputs.to(images.dtype)), (), black,
                            torch.stack([black.expand_as(images), grey, blurred], dim=1),
                            images.new_ones(len(images)),
                            lambda attributions, sign: pixels_to_grid(attributions, layout, sign),
                            layout.grid, torch.ones(len(images), *layout.grid, dtype=torch.bool, device=images.device),
                            lambda row, masks: hide_patches(row, masks, black, layout),
                            lambda scores, sign: _signed(scores, sign).float())


def embedding_space(model: nn.Module, batch: TokenBatch) -> AttributionSpace:
    """Word embeddings from the padding token's embedding (zeros for a model without one, as GPT-2)."""
    embedding = model.get_input_embeddings()
    with torch.no_grad():
        words = embedding(batch.input_ids)
    pad = getattr(model.config, "pad_token_id", None)
    baseline = (embedding.weight[pad].detach() if pad is not None else words.new_zeros(words.shape[-1]))
    baseline = baseline.expand_as(words[:1])
    positions = batch.position if batch.position is not None else torch.full_like(batch.input_ids[:, 0], -1)
    segments = () if batch.token_type_ids is None else (batch.token_type_ids,)

    def forward(inputs: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position: torch.Tensor, *token_type_ids: torch.Tensor) -> torch.Tensor:
        handle = embedding.register_forward_hook(lambda _module, _args, output: inputs.to(output.dtype))
        try:
            return class_logits(model, replace(batch, input_ids=input_ids, attention_mask=attention_mask,
                                               position=position, token_type_ids=next(iter(token_type_ids), None)))
        finally:
            handle.remove()

    return AttributionSpace(
        words, forward, (batch.input_ids, batch.attention_mask, positions, *segments), baseline,
        baseline.expand_as(words)[:, None], torch.stack([row[real].std() for row, real in zip(words, batch.real)]),
        lambda attributions, sign: embeddings_to_tokens(attributions, batch.real, sign),
        (words.shape[1],), batch.real.bool(), lambda row, masks: torch.where(masks[..., None], baseline, row),
        lambda scores, sign: embeddings_to_tokens(scores[..., None], batch.real, sign), batch.real)


def explained_space(model: nn.Module, inputs: Inputs, target_class: TargetClass
                    ) -> tuple[AttributionSpace, torch.Tensor, torch.Tensor]:
    """The space to attribute ``inputs`` in, each row's target class (B,) and the logits (B, num_classes)."""
    batch, logits, layout = predict(model, inputs, class_logits)
    targets = resolve_targets(logits, target_class)
    space = embedding_space(model, batch) if isinstance(batch, TokenBatch) else pixel_space(model, batch, layout)
    return space, targets, logits


def _attribute(model: nn.Module, inputs: Inputs, target_class: TargetClass, sign: Sign,
               explain: Callable[[AttributionSpace, torch.Tensor], torch.Tensor]) -> Saliency:
    """Shared frame of the captum methods: :func:`explained_space`, captum call ``explain(space, targets)``, maps."""
    refuse_inference_mode()
    space, targets, logits = explained_space(model, inputs, target_class)
    with eval_mode(model), torch.enable_grad():
        attributions = explain(space, targets)
    return Saliency(space.to_maps(attributions.detach(), sign), logits)


@register_method("integrated_gradients", needs_gradients=True, requires=("captum",))
def integrated_gradients(
    model: nn.Module,
    inputs: Inputs,
    *,
    target_class: TargetClass = None,
    steps: int = 32,
    sign: Sign = "absolute",
) -> Saliency:
    """Integrated Gradients (Sundararajan et al. 2017), ``steps`` Riemann steps (captum's Gauss–Legendre rule);
    costs ``steps`` forward + backward passes. ``inputs`` as for every method
    (:data:`~vitroll.methods.inputs.Inputs`).

    Images: from a zero baseline (the dataset-mean colour after normalisation); maps (B, h, w). Texts: along the
    straight path from the padding token's embedding, at every real position, to the word embeddings (position and
    segment embeddings untouched); token scores (B, L), the attribution summed over the embedding dimension,
    padded positions 0. The padding token because it is the model's own "no word here" (BERT's ``[PAD]`` row is
    zero at initialisation and gets no gradient in training); a model without one (GPT-2) starts from zeros, since
    its other tokens (end-of-text included) are words it reads. With ``sign="signed"`` the scores sum to
    score(input) − score(baseline) up to the Riemann error. Float32 on the model's device.

    Parameters
    ----------
    steps : int ≥ 1
        Points on the path from the baseline to the input.
    sign : {"absolute", "positive", "signed"}
        What of each attribution counts: its magnitude, its positive part (evidence for the class), or itself.
    """
    _check_at_least_one(steps=steps)
    attr = _captum_attr()

    def explain(space: AttributionSpace, targets: torch.Tensor) -> torch.Tensor:
        method = attr.IntegratedGradients(space.forward)
        return method.attribute(space.inputs, baselines=space.baseline, target=targets,
                                additional_forward_args=space.extra, n_steps=steps,
                                internal_batch_size=max(len(space.inputs), 8) * 4)

    return _attribute(model, inputs, target_class, sign, explain)


@register_method("gradient_shap", needs_gradients=True, requires=("captum",))
def gradient_shap(
    model: nn.Module,
    inputs: Inputs,
    *,
    target_class: TargetClass = None,
    samples: int = 16,
    noise: float = 0.1,
    seed: int = 0,
    sign: Sign = "absolute",
) -> Saliency:
    """GradientSHAP (Lundberg & Lee 2017, captum's estimator): expected gradients × (input − baseline) over
    ``samples`` random points between the input (with Gaussian ``noise``) and a baseline. Reproducible for a given
    ``seed``; float32 on the model's device. ``inputs`` as for every method (:data:`~vitroll.methods.inputs.Inputs`).

    Each input is explained on its own, with the random draws of ``seed``, so its map does not depend on the batch
    it comes in. Images: baselines drawn from a black, the image's mean-grey and its blurred copy, ``noise`` in
    normalised pixel units; maps (B, h, w). Texts: the baseline of :func:`integrated_gradients` (the padding token's
    embedding, or zeros), ``noise`` relative to the standard deviation of the text's word embeddings; token scores
    (B, L), padded positions 0; each text is drawn over its real tokens only, as if it came alone and unpadded.

    Parameters
    ----------
    samples : int ≥ 1
        Random points drawn per input.
    noise : float ≥ 0
        Standard deviation of the Gaussian noise added to the input at each point (0: none).
    seed : int
        Seed of the draws.
    sign : {"absolute", "positive", "signed"}
        As in :func:`integrated_gradients`.
    """
    _check_at_least_one(samples=samples)
    if not noise >= 0:
        raise OptionValueError(f"{method_option('noise')} must be ≥ 0 (a standard deviation); got {noise}")
    if not 0 <= seed < 2**32:  # NumPy's seeds, which captum draws the baselines from
        raise OptionValueError(f"{method_option('seed')} must be in 0…2³²−1 for gradient_shap; got {seed}")
    attr = _captum_attr()

    def explain(space: AttributionSpace, targets: torch.Tensor) -> torch.Tensor:
        x = space.inputs
        method = attr.GradientShap(space.forward)
        numpy_state = np.random.get_state()  # captum draws the baselines with NumPy, the noise with torch
        try:
            with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
                return torch.cat([_row_gradient_shap(method, space, targets, row, samples, noise, seed)
                                  for row in range(len(x))])
        finally:
            np.random.set_state(numpy_state)

    return _attribute(model, inputs, target_class, sign, explain)


def _row_gradient_shap(method: object, space: AttributionSpace, targets: torch.Tensor, row: int, samples: int,
                       noise: float, seed: int) -> torch.Tensor:
    """captum's GradientSHAP for row ``row`` of ``space`` alone (1, …), its draws seeded afresh with ``seed``: captum
    draws noise for the whole batch at once, so a batch would give each input other draws than it gets alone. A
    text is cut to its real tokens first (the noise tensor's shape sets which draw lands on which token), its
    padded positions 0."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    rows = slice(row, row + 1)
    inputs, baselines = space.inputs[rows], space.baselines[row]
    extra = tuple(tensor[rows] for tensor in space.extra)
    if space.own_tokens is not None:
        real = space.own_tokens[row]
        inputs, baselines = inputs[:, real], baselines[:, real]
        # per-token extras (1, L) are cut too; the explained position (1,) already counts real tokens only
        extra = tuple(tensor[:, real] if tensor.ndim == 2 else tensor for tensor in extra)
    attributions = method.attribute(inputs, baselines=baselines, target=targets[rows], additional_forward_args=extra,
                                    n_samples=samples, stdevs=noise * float(space.scale[row]))
    if space.own_tokens is None:
        return attributions
    padded = attributions.new_zeros(space.inputs[rows].shape)
    padded[:, real] = attributions
    return padded


def hide_patches(image: torch.Tensor, masks: torch.Tensor, baseline: torch.Tensor, layout: TokenLayout
                 ) -> torch.Tensor:
    """One image (1, C, H, W) once per mask of ``masks`` (P, h, w) bool on the patch grid of ``layout``, the masked
    patches' pixels replaced by ``baseline`` (broadcast to the image) → (P, C, H, W). A model that pads its input
    (:attr:`~vitroll.capture.TokenLayout.padded_hw`) cuts the padded input into patches: so are the masks."""
    height, width = image.shape[-2:]
    pixels = F.interpolate(masks[:, None].float(), size=layout.padded_hw or (height, width), mode="nearest").bool()
    return torch.where(pixels[..., :height, :width], baseline, image)


def window_means(drops: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
    """Each cell's mean of ``drops`` (P, K) over the windows (P, *cells) bool covering it → (K, *cells); 0 on a cell
    no window covers."""
    covered = windows.sum(dim=0).clamp(min=1)
    return torch.tensordot(drops.float().T, windows.float(), dims=1) / covered


def sliding_windows(cells: tuple[int, ...], window: int, name: str = "window") -> torch.Tensor:
    """Every window of ``window`` cells along each axis of a grid ``cells``, stride one cell: (P, *cells) bool,
    row-major, P = ∏ (n − window + 1); a window that does not fit is refused naming it ``name`` (the caller's
    word for it: the option ``window``, caption's ``--window``)."""
    if window < 1 or window > min(cells):
        extent = (f"the grid is {' × '.join(map(str, cells))}" if len(cells) > 1
                  else f"the texts have {cells[0]} positions")
        raise OptionValueError(f"{name} must be between 1 and {min(cells)} ({extent}); got {window}")
    starts = list(itertools.product(*(range(n - window + 1) for n in cells)))
    masks = torch.zeros(len(starts), *cells, dtype=torch.bool)
    for p, start in enumerate(starts):
        masks[(p, *(slice(s, s + window) for s in start))] = True
    return masks


def _same_row(space: AttributionSpace, row: int, other: int) -> bool:
    return all(torch.equal(tensor[row], tensor[other]) for tensor in (space.inputs, *space.extra))


@register_method("occlusion", checks_constant_maps=False)  # warns itself: a window covering an input is a cause
def occlusion(
    model: nn.Module,
    inputs: Inputs,
    *,
    target_class: TargetClass = None,
    window: int = 1,
    batch_size: int = 64,
    sign: Sign = "positive",
) -> Saliency:
    """Occlusion (Zeiler & Fergus 2014): hide a window of the input, see how much the target's score drops.
    ``inputs`` as for every method (:data:`~vitroll.methods.inputs.Inputs`); no gradients, no attention.

    Images: every ``window`` × ``window`` block of patches (stride one patch) set to the zero baseline (the
    dataset-mean colour after normalisation, as :func:`integrated_gradients` starts from); a patch's score is the
    mean drop ``S(x) − S(x with the block hidden)`` over the blocks that cover it; maps (B, h, w). Texts: every
    ``window`` consecutive real tokens set to the padding token's embedding (zeros without one), so a text's
    scores do not depend on how it is padded; token scores (B, L), padded positions 0. ``sign="positive"`` keeps
    the evidence for the target (hiding it lowers the score); ``"signed"`` also shows where hiding raises it.
    Costs one forward pass per window and input, ``batch_size`` windows at a time. Float32 on the model's device.

    Parameters
    ----------
    window : int ≥ 1
        Side of the hidden block, in patches (or the number of consecutive tokens).
    batch_size : int ≥ 1
        Hidden copies run in one forward pass.
    sign : {"positive", "signed", "absolute"}
        Which score drops count (see above).
    """
    _check_at_least_one(batch_size=batch_size)
    space, targets, logits = explained_space(model, inputs, target_class)
    if len(space.cells) == 1 and window > space.cells[0]:  # texts all shorter than the window: theirs, not the option's
        every_window = torch.zeros(0, *space.cells, dtype=torch.bool, device=space.inputs.device)
    else:
        every_window = sliding_windows(space.cells, window, method_option("window")).to(space.inputs.device)
    scores, covered_whole = [], []
    with eval_mode(model), torch.no_grad():
        for row, target in enumerate(targets.tolist()):
            windows = every_window[~(every_window & ~space.real_cells[row]).flatten(1).any(dim=1)]
            if not len(windows):
                text = "the text" if len(targets) == 1 else f"text {row} of the batch"
                tokens = int(space.real_cells[row].sum())
                raise InputValueError(f"window {window} is longer than {text} ({tokens} tokens)")
            # an input repeated for several targets (an image against each of its texts) is hidden only once
            if not (row and _same_row(space, row, row - 1)):
                extra = tuple(tensor[row:row + 1] for tensor in space.extra)
                hidden = torch.cat([
                    space.forward(space.hide(space.inputs[row:row + 1], chunk),
                                  *(tensor.expand(len(chunk), *tensor.shape[1:]) for tensor in extra))
                    for chunk in windows.split(batch_size)])  # (P, num_classes)
            drops = logits[row, target] - hidden[:, target]  # (P,)
            scores.append(window_means(drops[:, None], windows)[0])  # padding, covered by none, is set to 0 below
            covered_whole.append(len(windows) == 1)
    maps = space.cells_to_maps(torch.stack(scores), sign)
    _warn_constant_occlusion(maps, space, covered_whole, window)
    return Saliency(maps, logits)


def _warn_constant_occlusion(maps: torch.Tensor, space: AttributionSpace, covered_whole: list[bool],
                             window: int) -> None:
    """:func:`~vitroll.methods.map_checks.warn_constant_maps` for occlusion's maps (B, *cells) at each input's
    real cells, naming the cause: a ``window`` that only fits once covers the whole input, so every cell gets the
    same score by construction (the model is not to blame); else windows so large that each hides as much (a
    keyword in all of them), or an untrained model."""
    values = [row[real] for row, real in zip(maps, space.real_cells)]
    what, whole_input = ("patch", "image") if len(space.cells) == 2 else ("token", "text")
    # the method option's name alone, as its other refusals say it ("window 5 is longer than the text"): the
    # command line's --window is caption's flag, not this option's
    whole = (f"window {window} covers the whole {whole_input}, hiding every {what} at once, so each gets the same "
             "score; a smaller window tells them apart")
    alike = (f"every window of {window} {what}s lowers the score alike; a smaller window may tell them apart, or a "
             "model with untrained (random) weights gives such maps") if window > 1 else UNTRAINED
    for cause, key, covering in ((whole, ("occlusion", "window", window), True),
                                 (alike, ("occlusion", window, tuple(space.cells) if what == "patch" else what),
                                  False)):
        warn_constant_maps("occlusion", [row if covered == covering else row[:0]
                                         for row, covered in zip(values, covered_whole)], cause, key)
