"""Argument groups shared by sub-commands, and turning parsed arguments into library objects."""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn

from vitroll.capture import HEAD_FUSIONS
from vitroll.methods import METHODS
from vitroll.models import ModelProvenance, has_random_weights, load_model
from vitroll.pipelines.explain import ExplainSettings
from vitroll.preprocess import Preprocessing
from vitroll.testbed import TESTBED_NAME


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=TESTBED_NAME,
                       help=f"timm model name or hf-hub:org/name (default: {TESTBED_NAME}, the shapes testbed ViT shipped with vitroll)")
    group.add_argument("--checkpoint", help="local weights: .safetensors, or .pth/.pt/.bin (read with weights_only=True)")
    group.add_argument("--pretrained", action="store_true", help="load timm's pretrained weights (hub or local cache)")
    group.add_argument("--num-classes", type=int, help="classifier size (default: from the checkpoint's head)")
    group.add_argument("--class-names", help="class names file: one per line, or JSON")
    group.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, … (default: cuda when available)")
    group.add_argument("--crop-pct", type=float, help="override the model's crop_pct (1.0: no margin)")
    group.add_argument("--crop-mode", choices=("center", "squash"), help="squash with --crop-pct 1 shows the whole image")
    group.add_argument("--input-size", type=int, nargs=2, metavar=("H", "W"),
                       help="override the model input size (models built with --img-size or dynamic_img_size)")
    group.add_argument("--mean", type=float, nargs=3, metavar="M", help="override the normalisation mean")
    group.add_argument("--std", type=float, nargs=3, metavar="S", help="override the normalisation std")
    group.add_argument("--interpolation", choices=("bicubic", "bilinear", "nearest", "lanczos"),
                       help="override the resize filter")
    group.add_argument("--img-size", type=int, nargs="+", metavar="SIZE",
                       help="build the model for this input size (H or H W; timm resamples position embeddings)")
    group.add_argument("--dynamic-img-size", action="store_true",
                       help="build the model to accept any input size (ViT, EVA, CaiT)")


def add_method_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("method (options a method does not take are ignored; unset ones keep its default)")
    group.add_argument("--method", default="rollout", choices=sorted(METHODS))
    add_method_options(group)


def add_method_options(group: "argparse._ArgumentGroup") -> None:
    group.add_argument("--head-fusion", choices=HEAD_FUSIONS, help="how heads are fused (default mean)")
    group.add_argument("--discard-ratio", type=float,
                       help="drop this fraction of the weakest attention per row (rollout 0, grad_rollout 0.9)")
    group.add_argument("--attention-weight", type=float, help="α in rownorm(α·A + (1−α)·I) (default 0.5)")
    group.add_argument("--start-layer", type=int, help="first layer included in rollout / chefer (default 0)")
    group.add_argument("--target-class", type=int, help="class explained by gradient methods (default: the prediction)")
    group.add_argument("--max-attention-memory", type=float, metavar="MiB",
                       help="attention memory budget while recording: per-head probabilities are computed in blocks "
                            "within it, and rollout keeps layers factored once all layers' maps would exceed it "
                            "(default 1024 MiB)")


def method_options_from_args(args: argparse.Namespace) -> dict[str, object]:
    return {
        "head_fusion": args.head_fusion, "discard_ratio": args.discard_ratio, "attention_weight": args.attention_weight,
        "start_layer": args.start_layer, "target_class": args.target_class,
        "max_attention_memory": int(args.max_attention_memory * 2**20) if args.max_attention_memory else None,
    }


def add_render_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("rendering")
    group.add_argument("--cmap", default="jet", help="matplotlib colormap")
    group.add_argument("--alpha", type=float, default=0.5, help="opacity of the heatmap")
    group.add_argument("--upsample", default="bilinear", choices=("bilinear", "bicubic", "nearest"))
    group.add_argument("--normalize", default="minmax", choices=("minmax", "percentile"))
    group.add_argument("--key-patches", type=int, default=0, metavar="K", help="outline the K highest-scoring patches")


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, method and rendering groups every explaining sub-command takes."""
    add_model_arguments(parser)
    add_method_arguments(parser)
    add_render_arguments(parser)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def model_from_args(args: argparse.Namespace) -> nn.Module:
    build: dict[str, object] = {}
    if args.img_size:
        build["img_size"] = args.img_size[0] if len(args.img_size) == 1 else tuple(args.img_size[:2])
    if args.dynamic_img_size:
        build["dynamic_img_size"] = True
    model = load_model(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint,
                       num_classes=args.num_classes, device=resolve_device(args.device), **build)
    if has_random_weights(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint):
        print(f"vitroll: note: {args.model} has random weights (no --pretrained or --checkpoint); its maps mean nothing",
              file=sys.stderr)
    return model


def provenance_from_args(args: argparse.Namespace, model: nn.Module) -> ModelProvenance:
    """Model name and weights source (with the checkpoint's SHA-256) of the model :func:`model_from_args` built."""
    return ModelProvenance.of(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint, model=model)


def preprocessing_from_args(model: nn.Module, args: argparse.Namespace) -> Preprocessing:
    return Preprocessing.from_model(
        model, crop_pct=args.crop_pct, crop_mode=args.crop_mode, interpolation=args.interpolation,
        input_size=tuple(args.input_size) if args.input_size else None,
        mean=tuple(args.mean) if args.mean else None, std=tuple(args.std) if args.std else None,
    )


def settings_from_args(args: argparse.Namespace) -> ExplainSettings:
    return ExplainSettings(method=args.method, method_options=method_options_from_args(args), cmap=args.cmap,
                           alpha=args.alpha, interpolation=args.upsample, normalization=args.normalize,
                           key_patches=args.key_patches)
