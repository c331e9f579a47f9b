"""AttentionRecorder: record every attention layer of a ViT of a registered family during a forward pass."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Callable, Optional, TypeVar

import torch
from torch import nn

from vitroll.capture.blocking import rows_per_block
from vitroll.capture.factored import (
    AttentionKernelSwap, FactoredAttention, attention_with_log_normalizer, fused_attention_with_log_normalizer,
)
from vitroll.capture.families import Padding, TokenLayout, family_of
from vitroll.capture.fusion import check_head_fusion, fuse_heads
from vitroll.capture.head_mean import head_mean_attention
from vitroll.capture.readouts import AttentionReadout, AttentionSink, check_readout, readout_for
from vitroll.errors import OptionValueError, RecorderUsageError, UnsupportedModelError
from vitroll.wording import method_option

_Record = TypeVar("_Record")

DEFAULT_CHUNK_BYTES = 2**30
"""Default attention memory budget: per-head probabilities (B, H, Q, N) are computed in query blocks within it, and
factored recording (when asked for) takes over once the head-fused maps of all layers, L·B·N²·itemsize bytes,
would exceed it (vit_small at N = 4097, one image: 768 MiB, recorded dense; two images: factored)."""

ACCELERATOR_BUDGET_SHARE = 4
"""On a CUDA device the default budget grows to this fraction (a quarter) of its free memory: dense records cost
far less time than factored ones wherever they fit (on an H200 at N = 4097, vit_small rollout / forward was 2.4
dense against 5.6 factored), and a GPU with room for them should not be held to the CPU's 1 GiB."""


RECORD_FROM_FACTORS_ON = frozenset({"cuda"})
"""Device types where a dense head-mean record is computed from the factors of the model's own fused kernel
(its output and row log-sum-exp, then :func:`~vitroll.capture.head_mean.head_mean_attention`) instead of by the
blocked kernel. On a GPU the blocked kernel's per-head float32 probabilities, their conversions and memory traffic
cost several forward passes under bf16 autocast (``docs/gpu_check.md``); on CPU the blocked kernel, which computes
the output and the record in one pass, stays."""


def default_attention_budget(device: torch.device) -> int:
    """The attention memory budget in bytes when none is given: :data:`DEFAULT_CHUNK_BYTES`, or on a CUDA device
    1/:data:`ACCELERATOR_BUDGET_SHARE` of its free memory where that is more."""
    if device.type == "cuda":
        free_bytes, _total = torch.cuda.mem_get_info(device)
        return max(DEFAULT_CHUNK_BYTES, free_bytes // ACCELERATOR_BUDGET_SHARE)
    return DEFAULT_CHUNK_BYTES


def attention_probabilities(
    q: torch.Tensor, k: torch.Tensor, scale: float, attn_mask: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + mask)`` for queries (B, H, Q, D) and keys (B, H, N, D) → (B, H, Q, N).

    A boolean ``attn_mask`` marks allowed positions; a float one is added to the logits. A query row with no allowed
    key (a padded query under a causal mask with left padding) gets all zeros, as PyTorch's fused kernel gives it,
    not NaN.
    """
    logits = (q * scale) @ k.transpose(-2, -1)
    if attn_mask is None:
        return logits.softmax(dim=-1)
    if attn_mask.dtype != torch.bool:
        return (logits + attn_mask).softmax(dim=-1)
    probabilities = logits.masked_fill(~attn_mask, float("-inf")).softmax(dim=-1)
    return probabilities.masked_fill(~attn_mask.any(dim=-1, keepdim=True), 0.0)


def attach_kernel_swap(module: nn.Module,
                       kernel_for: Callable[[tuple], Callable[..., torch.Tensor]]) -> Callable[[], None]:
    """For each forward call of ``module``, send its ``F.scaled_dot_product_attention`` call to the kernel
    ``kernel_for(args)`` picks from the call's positional arguments, as ``kernel(q, k, v, attn_mask, scale) -> output``
    (the kernel a recorder or an :class:`~vitroll.capture.readouts.AttentionSink` computes and records with).

    Returns the function that undoes it, also after a forward that raised half-way.
    """
    swap = AttentionKernelSwap()

    def start(_module: nn.Module, args: tuple) -> None:
        kernel = kernel_for(args)

        def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                      dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                      **options: object) -> torch.Tensor:
            if dropout_p or is_causal or options:
                raise UnsupportedModelError(
                    f"{type(module).__name__} called its attention kernel with dropout, a causal mask or other "
                    "options; vitroll records plain self-attention in eval mode only"
                )
            return kernel(q, k, v, attn_mask, q.shape[-1] ** -0.5 if scale is None else scale)

        swap.target = attention
        swap.__enter__()

    def stop(_module: nn.Module, _args: tuple, _output: object) -> None:
        if swap.target is not None:
            swap.target = None
            swap.__exit__(None, None, None)

    before = module.register_forward_pre_hook(start)
    after = module.register_forward_hook(stop)

    def detach() -> None:
        before.remove()
        after.remove()
        stop(module, (), None)  # the forward raised between start and stop

    return detach


def attach_sdpa_call(module: nn.Module, sink: AttentionSink) -> Callable[[], None]:
    """The readout (:attr:`AttentionReadout.attach`) of an attention module that calls
    ``F.scaled_dot_product_attention`` itself, without dropout or a causal mask: that call goes to the sink's kernel,
    which returns the same output and records the probabilities (in the graph for gradient methods).

    >>> readout = AttentionReadout(MyAttention, attach=attach_sdpa_call)   # doctest: +SKIP
    """
    return attach_kernel_swap(module, lambda _args: sink.attention)


def _patch_sides(size: int, cells: int) -> tuple[float, float]:
    """The open interval of patch sides that cut ``size`` pixels into ``cells`` patches, rounded either way (a
    padded last patch, or a cropped one)."""
    return size / (cells + 1), (size / (cells - 1) if cells > 1 else float("inf"))


def _refuse_grid_off_the_image(family: str, grid: tuple[int, int], image_hw: tuple[int, int]) -> None:
    """Refuse a layout grid whose patch count adds up but whose shape does not follow the image: no one patch side
    cuts both the height into h rows and the width into w columns (grid (4, 9) of a 96×96 input cut in 6×6 patches),
    which would scatter the maps. A grid of the right shape in the wrong order (columns first) cannot be told."""
    (low_h, high_h), (low_w, high_w) = _patch_sides(image_hw[0], grid[0]), _patch_sides(image_hw[1], grid[1])
    if max(low_h, low_w) >= min(high_h, high_w):
        raise UnsupportedModelError(
            f"family {family!r}: token_layout's grid {grid[0]}×{grid[1]} (h×w) does not fit a {image_hw[0]}×"
            f"{image_hw[1]} input: its rows would be {image_hw[0] / grid[0]:.3g} pixels high and its columns "
            f"{image_hw[1] / grid[1]:.3g} wide; the grid must be (H // patch, W // patch) of the input the model ran "
            "on")


class AttentionRecorder:
    """Context manager that records the attention probabilities of every layer of a model.

    On entry it attaches hooks to each attention module of ``model`` (found through the model's
    :mod:`family <vitroll.capture.families>` and each module's :mod:`readout <vitroll.capture.readouts>`);
    on exit, also when the forward raised, it removes them and restores every flag it changed. Each
    forward pass overwrites the previous one's record.

    Parameters
    ----------
    model : nn.Module
        A model of a registered family (the timm families, or one added with :func:`vitroll.register_family`).
    head_fusion : {"mean", "max", "min"} or None
        Heads are fused inside the hook, so only (B, N, N) per layer is kept; ``None`` keeps (B, H, N, N).
    keep_graph : bool
        Keep the probabilities in the autograd graph (for gradient methods; see :meth:`gradients`). Forces the
        unfused path and stores per-head probabilities, ignoring ``head_fusion`` and ``dtype``.
    dtype : torch.dtype
        Storage precision of the recorded maps, a floating-point type (fusion itself runs in the model's precision).
    chunk_bytes : int, optional
        Attention memory budget (default :func:`default_attention_budget`: 1 GiB, or a quarter of a GPU's free
        memory where that is more): per-head probabilities (B, H, Q, N) are
        materialised in query blocks within it. Modules on their fused kernel have that kernel call replaced by a
        blocked kernel, which computes the model's output and the record in one pass; modules already on their
        unfused path, and ``keep_graph``, hook the model's own probabilities.
    factored : bool
        When the head-fused maps of all layers (L·B·N² values) would exceed ``chunk_bytes``, record each layer
        as a :class:`~vitroll.capture.factored.FactoredAttention` instead (queries, keys and row
        log-normalisers, O(N·D) memory): the model's fused kernel call is swapped for one that also returns the
        log-normalisers. Only with ``head_fusion="mean"``; for the class-token rollout chain.

    Examples
    --------
    >>> with AttentionRecorder(model) as recorder:          # doctest: +SKIP
    ...     logits = model(images)
    >>> recorder.attentions[0].shape                         # doctest: +SKIP
    torch.Size([B, N, N])
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        head_fusion: Optional[str] = "mean",
        keep_graph: bool = False,
        dtype: torch.dtype = torch.float32,
        chunk_bytes: Optional[int] = None,
        factored: bool = False,
    ) -> None:
        check_head_fusion(head_fusion)
        if not isinstance(dtype, torch.dtype):  # numpy's float16 and "float16" have no is_floating_point
            raise OptionValueError(f"dtype must be a torch dtype (torch.float32, torch.float16, torch.bfloat16, "
                                   f"torch.float64); got {dtype!r} ({type(dtype).__name__})")
        if not dtype.is_floating_point:  # an integer or bool record rounds every probability to 0 or 1
            raise OptionValueError(f"{method_option('dtype')} must be a floating-point type (float32, float16, "
                                   f"bfloat16, float64); got {dtype}")
        if factored and (keep_graph or head_fusion != "mean"):
            raise OptionValueError("factored recording keeps the head mean only: use head_fusion='mean' without "
                                   "keep_graph")
        self.model = model
        self.family = family_of(model)
        self.head_fusion = None if keep_graph else head_fusion
        self.keep_graph = keep_graph
        self.dtype = dtype
        self.chunk_bytes = chunk_bytes
        # the default is read once: free GPU memory shrinks as layers are recorded, and one forward pass must not
        # switch from dense to factored records half-way
        self._default_budget: Optional[int] = None
        self.factored = factored and self.family.assemble is None  # assembling (CaiT) needs dense records
        self._modules = self.family.attention_modules(model)
        if not self._modules:
            raise UnsupportedModelError(
                f"family {self.family.name!r}: attention_modules gave no modules for this {type(model).__name__}; "
                "it must list the attention module of each layer, in forward order")
        # a module shared by several layers (ALBERT's) runs once for each, recorded per call through its custom
        # readout only
        self._layers_of: dict[nn.Module, list[int]] = {}
        for index, module in enumerate(self._modules):
            self._layers_of.setdefault(module, []).append(index)
        repeated = [indices[:2] for module, indices in self._layers_of.items()
                    if len(indices) > 1 and readout_for(module).attach is None]
        if repeated:
            first, again = min(repeated, key=lambda pair: pair[1])
            raise UnsupportedModelError(
                f"family {self.family.name!r}: attention_modules lists the same {type(self._modules[first]).__name__} "
                f"at positions {first} and {again}; it must list each layer's own attention module once")
        self._records: list[Optional[torch.Tensor | FactoredAttention]] = [None] * len(self._modules)
        # keep_graph: per layer, the tensor of the model's graph the probabilities were read from, and the
        # rearrangement of its elements that gives them (B, H, Q, N); the same rearrangement maps its gradient
        self._graph_sources: list[Optional[tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]]] = (
            [None] * len(self._modules))
        self._readout_modules = self.family.readout_modules(model) if self.family.readout_modules else []
        self._readout_records: list[Optional[torch.Tensor]] = [None] * len(self._readout_modules)
        self._undo: list[Callable[[], None]] = []
        self._call_order: list[int] = []  # positions in attention_modules, as the first forward pass calls them

    # -- context management -------------------------------------------------------------------------
    def __enter__(self) -> "AttentionRecorder":
        try:
            for module, indices in self._layers_of.items():
                self._undo.append(module.register_forward_pre_hook(self._note_call(indices)).remove)
                self._attach(indices, module, readout_for(module))
            for index, module in enumerate(self._readout_modules):
                readout = readout_for(module)
                if readout.attach is not None:  # the pooling query's attention is read beside the model, never in graph
                    sink = _LayerSink(self, self._readout_records, index, keep_graph=False, head_fusion="mean")
                    self._undo.append(readout.attach(module, sink))
                else:
                    check_readout(module, readout)
                    self._attach_query_key(self._readout_records, index, module, readout, "mean")
        except BaseException:
            self._detach()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._detach()

    def _detach(self) -> None:
        while self._undo:
            self._undo.pop()()

    # -- results -------------------------------------------------------------------------------------
    @property
    def attentions(self) -> list[torch.Tensor]:
        """Per layer, in forward order: (B, N, N), or (B, H, N, N) for per-head / ``keep_graph`` records; with
        ``factored``, long sequences' layers are :class:`~vitroll.capture.factored.FactoredAttention`."""
        return self._in_token_space(self._recorded(self._records), "identity")

    def gradients(self, score: torch.Tensor, *, retain_graph: bool = False) -> list[torch.Tensor]:
        """∂ ``score`` / ∂ attention for every layer, in the token space and shapes of :attr:`attentions`
        (B, H, N, N), zero where a layer has no entries of its own (CaiT). Needs ``keep_graph``; ``score`` is a
        scalar computed from the model's output in the recorded forward pass. Parameters' ``.grad`` stay untouched.
        ``retain_graph`` keeps the graph for the gradient of another score of the same pass.

        Parameters
        ----------
        score : torch.Tensor, shape ()
            The explained score (a class logit summed over the batch, say), computed in the recorded pass.
        retain_graph : bool
            Keep the graph, for the gradient of another score of the same pass.

        Returns
        -------
        list of torch.Tensor, each (B, H, N, N)
            The gradient with respect to each layer's attention, first layer first.

        Raises
        ------
        RecorderUsageError
            For a recorder made without ``keep_graph=True``.
        """
        if not self.keep_graph:
            raise RecorderUsageError("attention gradients need AttentionRecorder(model, keep_graph=True)")
        sources = self._recorded(self._graph_sources)
        gradients = torch.autograd.grad(score, [source for source, _ in sources], retain_graph=retain_graph,
                                        allow_unused=True)
        gradients = [torch.zeros_like(source) if gradient is None else gradient
                     for gradient, (source, _) in zip(gradients, sources)]
        return self._in_token_space(
            [to_probabilities(gradient) for gradient, (_, to_probabilities) in zip(gradients, sources)], "zeros")

    def _note_call(self, indices: list[int]) -> Callable[[nn.Module, tuple], None]:
        """A pre-hook noting the position of each call of a module listed at ``indices`` (the next of them for a
        module shared by several layers), for the first forward pass."""
        calls = itertools.count()

        def note(_module: nn.Module, _args: tuple) -> None:
            if len(self._call_order) < len(self._modules):
                self._call_order.append(indices[next(calls) % len(indices)])

        return note

    def _recorded(self, records: list[Optional[_Record]]) -> list[_Record]:
        missing = [i for i, record in enumerate(records) if record is None]
        if missing:
            raise RecorderUsageError(f"no attention was recorded for layers {missing}; run a forward pass inside the "
                                     "context")
        if records is self._records and self._call_order != sorted(self._call_order):
            raise UnsupportedModelError(
                f"family {self.family.name!r}: attention_modules lists the layers in another order than the forward "
                f"runs them (it ran positions {self._call_order}); list them in forward order")
        return list(records)  # type: ignore[arg-type]

    def _in_token_space(self, records: list[torch.Tensor], padding: Padding) -> list[torch.Tensor]:
        return self.family.assemble(self.model, records, padding) if self.family.assemble else records

    def token_layout(self, image_hw: object) -> TokenLayout:
        """Token layout of the model for an input of spatial size ``image_hw`` = (H, W) (for a text family, the
        :class:`~vitroll.io.text.TokenBatch` that was run).

        For attention-pooling models it carries the pooling query's attention (B, N), averaged over heads and
        latent queries, recorded in the same forward pass (without gradient).

        Parameters
        ----------
        image_hw : (int, int) or TokenBatch
            The (H, W) of the images run, or the token batch run through a text model.

        Returns
        -------
        TokenLayout
            Prefix tokens, readout and patch grid (h, w) of the recorded sequence of N tokens.

        Raises
        ------
        RecorderUsageError, UnsupportedModelError
            Where no forward pass was recorded, or the layout's token count is not the recorded N.
        """
        layout = self.family.token_layout(self.model, image_hw)
        if layout.readout == "attention_pool":
            if not self._readout_records or self._readout_records[0] is None:
                raise RecorderUsageError("no attention-pool attention was recorded; run a forward pass inside the "
                                         "context")
            pool_weights = self._readout_records[0].float().mean(dim=1)
            # a pool that skips the prefix tokens (timm's default with class or register tokens) attends to the
            # last tokens only: the prefix tokens get no weight in the decision row
            skipped = layout.num_tokens - pool_weights.shape[-1]
            layout = replace(layout, pool_weights=torch.nn.functional.pad(pool_weights, (skipped, 0)))
        recorded = self.attentions[0].shape[-1]
        if layout.num_tokens != recorded:
            parts = ("" if layout.grid is None else
                     f" ({layout.num_prefix_tokens} prefix + {layout.grid[0]}×{layout.grid[1]} patches)")
            raise UnsupportedModelError(
                f"token layout {layout} expects {layout.num_tokens} tokens{parts} but {recorded} were recorded: "
                f"the token_layout of family {self.family.name!r} must give num_prefix_tokens + h·w = {recorded}"
            )
        if layout.grid is not None and isinstance(image_hw, tuple):
            _refuse_grid_off_the_image(self.family.name, layout.grid, image_hw)
        return layout

    # -- hooks ---------------------------------------------------------------------------------------
    def _attach(self, indices: list[int], module: nn.Module, readout: AttentionReadout) -> None:
        """Attach the hooks that record ``module``'s attention as the layers ``indices``: one layer, or, for a module
        that the family lists at several layers (its weights shared, as ALBERT's), each of its calls in a forward
        pass as the next of them (through a custom readout only: others are refused when the recorder is built)."""
        if readout.attach is not None:
            sinks = [_LayerSink(self, self._records, index, keep_graph=self.keep_graph, head_fusion=self.head_fusion)
                     for index in indices]
            self._undo.append(readout.attach(module, sinks[0] if len(sinks) == 1 else _SharedModuleSink(sinks)))
            return
        index, = indices
        check_readout(module, readout)
        fused = readout.fused_flag is not None and getattr(module, readout.fused_flag)
        if readout.probs_module is None:
            self._attach_query_key(self._records, index, module, readout, self.head_fusion)
        elif self.keep_graph or not fused:
            self._attach_unfused(index, module, readout)
        else:
            self._attach_fused(index, module)

    def _attach_fused(self, index: int, module: nn.Module) -> None:
        """For a module on its fused kernel, its kernel call goes to the one :meth:`_kernel` picks per forward call.
        Masked layers (relative position bias) always take the blocked kernel."""
        self._undo.append(attach_kernel_swap(module,
                                             lambda args: self._kernel(index, *args[0].shape[:2], args[0].device)))

    def _kernel(self, index: int, batch: int, num_tokens: int, device: torch.device) -> Callable[..., torch.Tensor]:
        """The kernel ``(q, k, v, attn_mask, scale) -> output (B, H, Q, Dv)`` that computes layer ``index``'s attention
        and records it in the same pass, for a call on ``batch`` sequences of ``num_tokens`` tokens: with ``factored``
        and the head-fused maps of all layers over ``chunk_bytes``, the factored one; on a device of
        :data:`RECORD_FROM_FACTORS_ON`, the fused kernel with the head mean computed from its factors; else the
        blocked kernel (one computation serves the output and the record)."""
        dense_bytes = len(self._modules) * batch * num_tokens * num_tokens * self.dtype.itemsize
        if self.factored and dense_bytes > self._budget(device):
            return self._factored_kernel(index)
        if self.head_fusion == "mean" and device.type in RECORD_FROM_FACTORS_ON:
            return self._head_mean_kernel(index)
        return self._blocked_kernel(self._records, index, self.head_fusion)

    def _factored_kernel(self, index: int) -> Callable[..., torch.Tensor]:
        """Attention that keeps the layer's factors (:class:`FactoredAttention`) as its record."""
        return self._kernel_with_factors(index, FactoredAttention, attention_with_log_normalizer)

    def _head_mean_kernel(self, index: int) -> Callable[..., torch.Tensor]:
        """The model's fused attention kernel, with the head-mean map computed from its factors as the record."""
        return self._kernel_with_factors(index, self._head_mean_record, fused_attention_with_log_normalizer)

    def _head_mean_record(self, q: torch.Tensor, k: torch.Tensor, log_normalizer: torch.Tensor,
                          scale: float) -> torch.Tensor:
        with torch.no_grad():
            return head_mean_attention(q, k, log_normalizer, scale).to(self.dtype)

    def _budget(self, device: torch.device) -> int:
        if self.chunk_bytes:
            return self.chunk_bytes
        if self._default_budget is None:
            self._default_budget = default_attention_budget(device)
        return self._default_budget

    def _store(self, records: list[Optional[torch.Tensor]], index: int, shape: tuple[int, int, int, int],
               rows: Callable[[slice], torch.Tensor], device: torch.device, head_fusion: Optional[str]) -> None:
        """Fill ``records[index]`` from ``rows(slice) -> (B, H, Q, N)`` in query chunks within the memory bound.

        ``shape`` is (B, H, Q, N) of the whole (unfused) probabilities.
        """
        batch, heads, num_queries, num_keys = shape
        out_shape = (batch, num_queries, num_keys) if head_fusion else shape
        out = torch.empty(out_shape, dtype=self.dtype, device=device)
        bytes_per_row = batch * heads * num_keys * 4
        step = rows_per_block(bytes_per_row, num_queries, device, limit=self.chunk_bytes)
        for start in range(0, num_queries, step):
            block = slice(start, min(start + step, num_queries))
            out[..., block, :] = fuse_heads(rows(block), head_fusion)
        records[index] = out

    def _attach_query_key(self, records: list[Optional[torch.Tensor]], index: int, module: nn.Module,
                          readout: AttentionReadout, head_fusion: Optional[str]) -> None:
        q_module, k_module = (module.get_submodule(name) for name in readout.query_key_modules)
        state: dict[str, Optional[torch.Tensor]] = {}
        scale = getattr(module, readout.scale_attr)

        def remember_mask(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            mask = kwargs.get("attn_mask", args[1] if len(args) > 1 else None)
            state["mask"] = mask

        def remember_queries(_module: nn.Module, _args: tuple, q: torch.Tensor) -> None:
            state["q"] = q

        def record(_module: nn.Module, _args: tuple, k: torch.Tensor) -> None:
            q, mask = state.pop("q"), state.pop("mask", None)
            shape = (*q.shape[:3], k.shape[2])
            with torch.no_grad():
                self._store(
                    records, index, shape,
                    lambda rows: attention_probabilities(q[:, :, rows], k, scale, _mask_rows(mask, rows)),
                    k.device, head_fusion,
                )

        self._undo.append(module.register_forward_pre_hook(remember_mask, with_kwargs=True).remove)
        self._undo.append(q_module.register_forward_hook(remember_queries).remove)
        self._undo.append(k_module.register_forward_hook(record).remove)

    def _kernel_with_factors(
        self, index: int, record: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], _Record],
        attend: Callable[..., Optional[tuple[torch.Tensor, torch.Tensor]]],
    ) -> Callable[..., torch.Tensor]:
        """Attention from ``attend(q, k, v, scale) -> (output, row log-sum-exp)`` with ``record(q, k, ℓ, scale)``
        as the layer's record (a :class:`FactoredAttention`, or the head-mean map computed from it); masked attention
        (which the factors cannot represent), or ``attend`` returning None, go to the blocked kernel."""
        blocked = self._blocked_kernel(self._records, index, self.head_fusion)

        def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                      scale: float) -> torch.Tensor:
            computed = None if attn_mask is not None else attend(q, k, v, scale)
            if computed is None:
                return blocked(q, k, v, attn_mask, scale)
            out, log_normalizer = computed
            self._records[index] = record(q, k, log_normalizer, scale)
            return out

        return attention

    def _blocked_kernel(self, records: list[Optional[torch.Tensor]], index: int,
                        head_fusion: Optional[str]) -> Callable[..., torch.Tensor]:
        """Attention computed in query blocks (:mod:`~vitroll.capture.blocking`), each block's probabilities fused
        (``head_fusion``) into ``records[index]`` on the way."""

        def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                      scale: float) -> torch.Tensor:
            out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=v.dtype, device=v.device)

            def rows(block: slice) -> torch.Tensor:
                probs = attention_probabilities(q[:, :, block], k, scale, _mask_rows(attn_mask, block))
                out[:, :, block] = probs.to(v.dtype) @ v  # in the autograd graph when gradients are on
                return probs.detach()

            self._store(records, index, (*q.shape[:3], k.shape[2]), rows, q.device, head_fusion)
            return out

        return attention

    def _attach_unfused(self, index: int, module: nn.Module, readout: AttentionReadout) -> None:
        if readout.fused_flag is not None:
            previous = getattr(module, readout.fused_flag)
            setattr(module, readout.fused_flag, False)
            self._undo.append(lambda: setattr(module, readout.fused_flag, previous))

        to_probabilities = readout.probs_from_input or _unchanged

        def record(_module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            source = args[0] if readout.probs_from_input else output
            probs = to_probabilities(source)
            if probs.dim() != 4:
                raise UnsupportedModelError(
                    f"{type(module).__name__}.{readout.probs_module} gave a tensor of shape {tuple(probs.shape)}, not "
                    "softmax probabilities (B, H, Q, N): AttentionReadout's probs_module must name the submodule "
                    "whose output is the attention after its softmax")
            if self.keep_graph:
                self._records[index] = probs
                self._graph_sources[index] = (source, to_probabilities)
                return
            with torch.no_grad():
                self._store(self._records, index, tuple(probs.shape), lambda rows: probs[:, :, rows], probs.device,
                            self.head_fusion)

        handle = module.get_submodule(readout.probs_module).register_forward_hook(record)
        self._undo.append(handle.remove)


class _LayerSink:
    """The :class:`~vitroll.capture.readouts.AttentionSink` of one record of a recorder (a layer, or an
    attention-pooling module's), for custom readouts."""

    def __init__(self, recorder: AttentionRecorder, records: list, index: int, *, keep_graph: bool,
                 head_fusion: Optional[str]) -> None:
        self._recorder, self._records, self._index = recorder, records, index
        self.keep_graph, self._head_fusion = keep_graph, head_fusion

    def record(self, shape: tuple[int, int, int, int], rows: Callable[[slice], torch.Tensor],
               device: torch.device) -> None:
        with torch.no_grad():
            self._recorder._store(self._records, self._index, shape, rows, device, self._head_fusion)

    def record_graph(self, probabilities: torch.Tensor) -> None:
        self._records[self._index] = probabilities
        self._recorder._graph_sources[self._index] = (probabilities, _unchanged)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                  scale: float) -> torch.Tensor:
        if self.keep_graph:
            probabilities = attention_probabilities(q, k, scale, attn_mask)
            self.record_graph(probabilities)
            return probabilities.to(v.dtype) @ v
        recorder = self._recorder
        if self._records is recorder._records:
            kernel = recorder._kernel(self._index, q.shape[0], q.shape[2], q.device)
        else:
            kernel = recorder._blocked_kernel(self._records, self._index, self._head_fusion)
        return kernel(q, k, v, attn_mask, scale)


class _SharedModuleSink:
    """The :class:`~vitroll.capture.readouts.AttentionSink` of a module that runs in several layers (its weights
    shared): each call records the next of its layers' sinks, in call order, from the first again once all have
    recorded (the next forward pass)."""

    def __init__(self, sinks: list[_LayerSink]) -> None:
        self._sinks, self._calls = sinks, 0
        self.keep_graph = sinks[0].keep_graph

    def _next(self) -> _LayerSink:
        sink = self._sinks[self._calls % len(self._sinks)]
        self._calls += 1
        return sink

    def record(self, shape: tuple[int, int, int, int], rows: Callable[[slice], torch.Tensor],
               device: torch.device) -> None:
        self._next().record(shape, rows, device)

    def record_graph(self, probabilities: torch.Tensor) -> None:
        self._next().record_graph(probabilities)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                  scale: float) -> torch.Tensor:
        return self._next().attention(q, k, v, attn_mask, scale)


def _unchanged(probs: torch.Tensor) -> torch.Tensor:
    return probs


def _mask_rows(mask: Optional[torch.Tensor], rows: slice) -> Optional[torch.Tensor]:
    """The query rows ``rows`` of a broadcastable (..., N, N) attention mask (or None)."""
    if mask is None or mask.shape[-2] == 1:
        return mask
    return mask[..., rows, :]
