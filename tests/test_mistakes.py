"""Every ordinary mistake, on every sub-command, ends in exactly one `vitroll: error: …` line and a non-zero exit.

Each row of :data:`MISTAKES` is one command line (``{img}``, ``{file}``, ``{out}`` … stand for files made in
``tmp_path``), the exit code it must end with and a piece of its single stderr line. The rows run in-process
through :func:`vitroll.cli.main` on the shipped testbed model; most fail while parsing, before a model is built.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

from vitroll.cli import EXIT_BROKEN_PIPE, main
from vitroll.commands.common import check_input_size
from vitroll.methods import chefer, rollout
from vitroll.checkpoints import save_as_safetensors
from vitroll.testbed.model import load_testbed_model
from vitroll.wording import argument, method_option, typed_as_options, worded_for_the_command_line

ROOT = Path(__file__).resolve().parents[1]
SHAPE = ROOT / "sample_images" / "shapes_disk.png"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")

# (sub-command and arguments, exit code, a piece of the one error line); argparse's own errors exit 2 as well
MISTAKES = [
    # the device, checked while parsing: a machine without it says which devices it has
    pytest.param("overlay {img} --device cuda:99", 2, "argument --device: cuda:99 is not available here",
                 id="overlay-cuda:99"),
    pytest.param("overlay {img} --device cuda", 2, "cuda is not available here (", id="overlay-cuda", marks=NO_CUDA),
    pytest.param("annotate {dir} --out {out} --device cuda", 2, "; available: cpu", id="annotate-cuda", marks=NO_CUDA),
    pytest.param("audit {img} --device cuda", 2, "; available: cpu", id="audit-cuda", marks=NO_CUDA),
    pytest.param("compare {img} --model a --model b --device cuda", 2, "; available: cpu", id="compare-cuda",
                 marks=NO_CUDA),
    pytest.param("evaluate --device cuda", 2, "; available: cpu", id="evaluate-cuda", marks=NO_CUDA),
    pytest.param("sanity --device cuda", 2, "; available: cpu", id="sanity-cuda", marks=NO_CUDA),
    pytest.param("overlay {img} --device nonsense", 2, "unknown device 'nonsense'; available: cpu",
                 id="device-nonsense"),
    pytest.param("overlay {img} --device meta", 2, "vitroll does not run on 'meta'", id="device-meta"),
    # preprocessing
    pytest.param("overlay {img} --crop-pct 0", 2, "argument --crop-pct: must be in (0, 1]; got 0", id="crop-pct-0"),
    pytest.param("overlay {img} --crop-pct -0.5", 2, "must be in (0, 1]; got -0.5", id="crop-pct-negative"),
    pytest.param("overlay {img} --crop-pct 1.5", 2, "must be in (0, 1]; got 1.5", id="crop-pct-above-1"),
    pytest.param("overlay {img} --crop-pct nan", 2, "argument --crop-pct: expected a finite number; got 'nan'",
                 id="crop-pct-nan"),
    pytest.param("overlay {img} --std 0.5 0 0.5", 2, "argument --std: must be > 0; got 0", id="std-0"),
    pytest.param("overlay {img} --input-size 320 320", 2,
                 "--input-size 320 320: VisionTransformer was built for 64×64 inputs; build it for this size with "
                 "--img-size 320 320, or for any size with --dynamic-img-size", id="input-size-not-built"),
    pytest.param("overlay {img} --input-size 0 64", 2, "argument --input-size: must be an integer ≥ 1; got 0",
                 id="input-size-0"),
    pytest.param("overlay {img} --img-size 32", 2, "--img-size does not apply to vitroll-shapes",
                 id="img-size-testbed"),
    # --trust-checkpoint trusts the --checkpoint file alone: without one it was accepted without a word
    pytest.param("overlay {img} --trust-checkpoint", 2, "error: --trust-checkpoint unpickles the file a --checkpoint "
                 "names, and no --checkpoint is given: it would trust nothing; give the checkpoint, or leave "
                 "--trust-checkpoint out", id="trust-without-checkpoint"),
    pytest.param("compare {img} --model vitroll-shapes --model vitroll-shapes --checkpoint none --checkpoint none "
                 "--trust-checkpoint", 2, "no --checkpoint is given: it would trust nothing",
                 id="compare-trust-without-checkpoint"),
    pytest.param("evaluate --testbed-kind pairs --trust-checkpoint --out {out}", 2,
                 "no --checkpoint is given: it would trust nothing", id="evaluate-trust-without-checkpoint"),
    # the method's options
    pytest.param("overlay {img} --start-layer 99", 2,
                 "error: --start-layer 99 is out of range for a model with 4 layers (0…3)", id="start-layer-rollout"),
    pytest.param("overlay {img} --start-layer 4 --method chefer", 2,
                 "error: --start-layer 4 is out of range for a model with 4 layers (0…3)", id="start-layer-chefer"),
    pytest.param("overlay {img} --start-layer -1", 2, "argument --start-layer: must be an integer ≥ 0; got -1",
                 id="start-layer-negative"),
    pytest.param("overlay {img} --discard-ratio 1", 2, "argument --discard-ratio: must be in [0, 1); got 1",
                 id="discard-1"),
    pytest.param("overlay {img} --attention-weight 0", 2, "argument --attention-weight: must be in (0, 1]; got 0",
                 id="attention-weight-0"),
    pytest.param("overlay {img} --attention-weight 1.2", 2, "must be in (0, 1]; got 1.2", id="attention-weight-1.2"),
    pytest.param("overlay {img} --target-class -1", 2, "argument --target-class: must be an integer ≥ 0",
                 id="target-negative"),
    pytest.param("overlay {img} --target-class 9 --method chefer", 2,
                 "error: --target-class 9 is out of range for a model with 4 classes (0…3)", id="target-too-large"),
    pytest.param("overlay {img} --method grad_rollout --option target_class=9", 2,
                 "error: --option target_class=9 is out of range for a model with 4 classes (0…3)",
                 id="option-target-too-large"),
    pytest.param("overlay {img} --method attention --option layer=4", 2,
                 "error: --option layer=4 is out of range for a model with 4 layers (-4…3)",
                 id="option-layer-too-large"),
    pytest.param("overlay {img} --option discard_ratio=1.5", 2,
                 "error: --option discard_ratio must be in [0, 1); got 1.5", id="option-discard-ratio"),
    pytest.param("overlay {img} --option attention_weight=2", 2,
                 "error: --option attention_weight must be in (0, 1]; got 2.0", id="option-attention-weight"),
    pytest.param("overlay {img} --option start_layer=99", 2,
                 "error: --option start_layer=99 is out of range for a model with 4 layers (0…3)",
                 id="option-start-layer"),
    pytest.param("overlay {img} --method chefer --option start_layer=4", 2,
                 "error: --option start_layer=4 is out of range for a model with 4 layers (0…3)",
                 id="option-start-layer-chefer"),
    pytest.param("overlay {img} --method grad_rollout --option discard_ratio=1", 2,
                 "error: --option discard_ratio must be in [0, 1); got 1.0", id="option-discard-ratio-grad-rollout"),
    pytest.param("overlay {img} --method flow --option attention_weight=0", 2,
                 "error: --option attention_weight must be in (0, 1]; got 0.0", id="option-attention-weight-flow"),
    pytest.param("overlay {img} --option max_attention_memory=0", 2,
                 "error: --option max_attention_memory must be ≥ 1 byte, or None for the default; got 0",
                 id="option-attention-memory-0"),
    pytest.param("overlay {img} --method integrated_gradients --option steps=0", 2,
                 "error: --option steps must be at least 1; got 0", id="option-steps-0"),
    pytest.param("overlay {img} --method gradient_shap --option samples=0", 2,
                 "error: --option samples must be at least 1; got 0", id="option-samples-0"),
    pytest.param("overlay {img} --method occlusion --option window=9", 2,
                 "error: --option window must be between 1 and 8 (the grid is 8 × 8); got 9", id="option-window-9"),
    pytest.param("overlay {img} --method occlusion --option batch_size=0", 2,
                 "error: --option batch_size must be at least 1; got 0", id="option-batch-size-0"),
    pytest.param("overlay {img} --max-attention-memory 0", 2, "argument --max-attention-memory: must be > 0; got 0",
                 id="attention-memory-0"),
    pytest.param("overlay {img} --max-attention-memory -5", 2, "must be > 0; got -5", id="attention-memory-negative"),
    pytest.param("overlay {img} --method magic", 2, "argument --method: invalid choice: 'magic'", id="unknown-method"),
    pytest.param("overlay {img} --method attention --option discard_ratio=0.9", 2,
                 "method 'attention' takes no option 'discard_ratio' (it takes: head_fusion, layer, "
                 "max_attention_memory)",
                 id="option-unknown"),
    pytest.param("overlay {img} --method integrated_gradients --option steps=four", 2,
                 "option 'steps' of method 'integrated_gradients' takes int; got 'four'", id="option-not-an-int"),
    pytest.param("overlay {img} --method flow --option solver=magic", 2,
                 "option 'solver' of method 'flow' takes 'scipy' | 'networkx'; got 'magic'", id="option-not-a-choice"),
    pytest.param("overlay {img} --option steps", 2, "argument --option: expected KEY=VALUE; got 'steps'",
                 id="option-no-value"),
    pytest.param("overlay {img} --discard-ratio 0.2 --option discard_ratio=0.3", 2,
                 "option 'discard_ratio' is given by --discard-ratio and --option; give it once", id="option-twice"),
    pytest.param("overlay {img} --method attention --option head_fusion=none", 2,
                 "head_fusion=none gives one map per head (B, H, h, w)", id="option-per-head-maps"),
    pytest.param("overlay {img} --method flow --option max_tokens=10", 2,
                 "attention flow on 65 tokens is impractical (one max-flow per "
                 "patch over 4·65² edges); use a smaller input or pass --option max_tokens=65 knowingly",
                 id="option-flow-max-tokens"),
    pytest.param("overlay {img} --option dtype=int8", 2,
                 "error: --option dtype must be a floating-point type (float32, float16, bfloat16, float64); "
                 "got torch.int8",
                 id="option-dtype-integer"),
    pytest.param("overlay {img} --method center --option sigma=0", 2,
                 "error: --option sigma must be > 0 (a fraction of the grid's "
                 "side); got 0.0", id="option-center-sigma-0"),
    pytest.param("overlay {img} --method center --option sigma=-0.25", 2, "error: --option sigma must be > 0",
                 id="option-sigma-negative"),
    pytest.param("overlay {img} --method gradient_shap --option noise=-1", 2,
                 "error: --option noise must be ≥ 0 (a standard deviation); got -1.0", id="option-noise-negative"),
    pytest.param("overlay {img} --method gradient_shap --option seed=-1", 2,
                 "error: --option seed must be in 0…2³²−1 for gradient_shap; got -1", id="option-shap-seed-negative"),
    pytest.param("annotate {dir} --out {out} --option steps=4", 2, "method 'rollout' takes no option 'steps'",
                 id="annotate-option"),
    pytest.param("compare {img} --model no-such-a --model no-such-b --option steps=4", 2,
                 "method 'rollout' takes no option 'steps'", id="compare-option-before-models"),
    pytest.param("evaluate --methods chefer,attention --option steps=4", 2,
                 "none of the methods chefer, attention takes option 'steps'", id="evaluate-option"),
    pytest.param("sanity --methods random --option seed=x", 2, "option 'seed' of method 'random' takes int; got 'x'",
                 id="sanity-option"),
    pytest.param("methods magic", 2, "argument NAME: invalid choice: 'magic'", id="methods-unknown"),
    # rendering
    pytest.param("overlay {img} --alpha 1.5", 2, "argument --alpha: must be in [0, 1]; got 1.5", id="alpha-1.5"),
    pytest.param("overlay {img} --alpha -0.1", 2, "must be in [0, 1]; got -0.1", id="alpha-negative"),
    pytest.param("overlay {img} --key-patches -3", 2, "argument --key-patches: must be an integer ≥ 0; got -3",
                 id="key-patches"),
    pytest.param("overlay {img} --key-patches three", 2, "expected an integer; got 'three'", id="key-patches-word"),
    # the model and its weights
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --num-classes 0", 2,
                 "argument --num-classes: must be an integer ≥ 1; got 0", id="num-classes-0"),
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --model-arg img_size=384", 2,
                 "argument --model-arg: img_size has its own flag: give --img-size", id="model-arg-own-flag"),
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --model-arg checkpoint_path=w.pth", 2,
                 "argument --model-arg: checkpoint_path has its own flag: give --checkpoint",
                 id="model-arg-checkpoint"),
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --model-arg depth", 2,
                 "argument --model-arg: expected KEY=VALUE; got 'depth'", id="model-arg-no-value"),
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --model-arg depth=2 --model-arg depth=3", 2,
                 "--model-arg depth is given twice; give it once", id="model-arg-twice"),
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --model-arg depht=2", 2,
                 "vit_tiny_patch16_224: cannot build model (VisionTransformer.__init__() got an unexpected keyword "
                 "argument 'depht')", id="model-arg-unknown"),
    pytest.param("overlay {img} --model-arg depth=2", 2, "--model-arg does not apply to vitroll-shapes",
                 id="model-arg-testbed"),
    pytest.param("overlay {img} --class-names {two_names}", 2, "2 class names for a model with 4 classes",
                 id="class-names-few"),
    pytest.param("overlay {img} --class-names {bad_json}", 2, "names.json: not valid JSON (", id="class-names-json"),
    pytest.param("overlay {img} --class-names {five_names}", 2, "5 class names for a model with 4 classes",
                 id="class-names-many"),
    pytest.param("overlay {img} --checkpoint {namespace_checkpoint}", 2, "--trust-checkpoint",
                 id="checkpoint-namespace"),
    pytest.param("overlay {img} --checkpoint {file}", 2, "a-file.txt: neither a safetensors file nor a torch.save file",
                 id="checkpoint-garbage"),
    pytest.param("overlay {img} --checkpoint {dir}", 2, "images: a folder, not a weights file", id="checkpoint-folder"),
    pytest.param("overlay {img} --checkpoint {whole_model}", 2,
                 "whole.pth: a whole pickled model (torch.save(model)), not a state dict, and unpickling it can run "
                 "arbitrary code, so vitroll refused; save its weights instead with torch.save(model.state_dict(), "
                 "FILE)",
                 id="checkpoint-whole-model"),
    pytest.param("overlay {img} --checkpoint {missing}", 2, "no such checkpoint file", id="checkpoint-missing"),
    pytest.param("overlay {img} --model vit_tiny_patch16_224 --pretrained --checkpoint {missing}", 2,
                 "--pretrained and --checkpoint both give the weights; give one", id="pretrained-and-checkpoint"),
    pytest.param("overlay {img} --model vit_tiny_patch16_22", 2, "did you mean vit_tiny_patch16_224", id="model-typo"),
    # output folders that are files
    pytest.param("overlay {img} --out {file}", 2, "argument --out: ", id="overlay-out-file"),
    pytest.param("overlay {img} --out {file}/sub", 2, "cannot be made: ", id="overlay-out-under-file"),
    pytest.param("annotate {dir} --out {file}", 2, "is an existing file, not a folder", id="annotate-out-file"),
    pytest.param("audit {img} --out {file}", 2, "is an existing file, not a folder", id="audit-out-file"),
    pytest.param("compare {img} --model a --model b --out {file}", 2, "is an existing file, not a folder",
                 id="compare-out-file"),
    pytest.param("evaluate --out {file}", 2, "is an existing file, not a folder", id="evaluate-out-file"),
    pytest.param("sanity {root}/nope --out {out}", 2, "/nope: no such folder", id="sanity-no-folder"),
    pytest.param("text a --position x", 2, "argument --position: expected an integer; got 'x'",
                 id="text-position-not-an-integer"),
    pytest.param("evaluate {img} --out {out}", 2, "disk.png: not a folder", id="evaluate-a-file"),
    pytest.param("sanity --out {file}", 2, "is an existing file, not a folder", id="sanity-out-file"),
    pytest.param("overlay {img} --out /proc/vitroll-test/out", 2,
                 "error: cannot make the output folder /proc/vitroll-test",
                 id="out-not-makeable",
                 marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")),
    # an empty path, which Path("") reads as the current folder: --out "" wrote there, annotate "" read it
    *(pytest.param(f"{command} --out {{nothing}}", 2, f"{command.split()[0]}: argument --out: the path is empty; "
                   "give a name (. for the current folder)", id=f"{command.split()[0]}-out-empty")
      for command in ("overlay {img}", "annotate {dir}", "audit {img}", "caption {img} --model m",
                      "compare {img} --model a --model b", "evaluate", "sanity", "text hi --model m")),
    *(pytest.param(command, 2, f"argument {argument}: the path is empty", id=f"empty-{argument}:{command}")
      for command, argument in (
          ("overlay {nothing}", "IMAGE"), ("overlay {img} {nothing}", "IMAGE"),
          ("caption {nothing} --model m", "IMAGE"),
          ("compare {nothing} --model a --model b", "IMAGE"), ("annotate {nothing} --out {out}", "INPUT"),
          ("audit {nothing}", "INPUT"), ("evaluate {nothing}", "FOLDER"), ("sanity {nothing}", "FOLDER"),
          ("overlay {img} --checkpoint {nothing}", "--checkpoint"),
          ("overlay {img} --class-names {nothing}", "--class-names"),
          ("compare {img} --model a --model b --checkpoint {nothing}", "--checkpoint"),
          ("audit {img} --masks {nothing}", "--masks"), ("audit {img} --boxes {nothing}", "--boxes"),
          ("audit {img} --body-masks {nothing}", "--body-masks"), ("app --examples {nothing}", "--examples"),
          ("text --model m --file {nothing}", "--file"))),
    # batch sizes, workers, counts
    pytest.param("overlay {img} --batch-size 0", 2, "argument --batch-size: must be an integer ≥ 1; got 0",
                 id="overlay-batch-0"),
    pytest.param("annotate {dir} --out {out} --batch-size -2", 2, "must be an integer ≥ 1; got -2",
                 id="annotate-batch"),
    pytest.param("annotate {dir} --out {out} --workers -1", 2, "argument --workers: must be an integer ≥ 0",
                 id="annotate-workers"),
    pytest.param("annotate {dir} --out {out} --limit -1", 2, "argument --limit: must be an integer ≥ 1; got -1",
                 id="annotate-limit"),
    pytest.param("annotate {dir} --out {out} --save overlay,movie", 2, "argument --save: takes one or more of overlay, "
                 "heatmap, figure, comma-separated, or none for the manifest alone; got 'movie'", id="annotate-save"),
    pytest.param("annotate {dir} --out {out} --save none,movie", 2, "argument --save: takes one or more of overlay, "
                 "heatmap, figure, comma-separated, or none for the manifest alone; got 'movie'",
                 id="annotate-save-none-unknown"),
    pytest.param("annotate {dir} --out {out} --save ,", 2, "argument --save: takes one or more of overlay, "
                 "heatmap, figure, comma-separated, or none for the manifest alone; got ','", id="annotate-save-empty"),
    pytest.param("annotate {dir} --out {out} --save heatmap,none", 2,
                 "argument --save: none (the manifest alone) is not combined with other kinds; got 'heatmap,none'",
                 id="annotate-save-none-among-kinds"),
    pytest.param("annotate {dir} --out {out} --disagree-below nan", 2, "expected a finite number; got 'nan'",
                 id="annotate-disagree-nan"),
    pytest.param("annotate {dir} --out {out} --disagree-below 0", 2, "--disagree-below marks rows by their agreement "
                 "with --compare-with METHOD; give --compare-with", id="annotate-disagree-below-alone"),
    pytest.param("annotate {dir}", 2, "the following arguments are required: --out", id="annotate-no-out"),
    pytest.param("audit {img} --batch-size 0", 2, "must be an integer ≥ 1; got 0", id="audit-batch"),
    pytest.param("audit {img} --workers -1", 2, "must be an integer ≥ 0; got -1", id="audit-workers"),
    pytest.param("audit {img} --frame -1", 2, "argument --frame: must be an integer ≥ 0", id="audit-frame"),
    pytest.param("audit {img} --top-percent 0", 2, "argument --top-percent: must be in (0, 100]; got 0",
                 id="audit-top-0"),
    pytest.param("audit {img} --top-percent 150", 2, "must be in (0, 100]; got 150", id="audit-top-150"),
    pytest.param("audit {img} --border 0.5", 2, "argument --border: must be in [0, 0.5); got 0.5", id="audit-border"),
    pytest.param("audit {img} --flag-threshold 1.5", 2, "argument --flag-threshold: must be in [0, 1]; got 1.5",
                 id="audit-flag-threshold"),
    pytest.param("audit {img} --window lungs", 2, "--window must be one of lung", id="audit-window"),
    pytest.param("audit {img} --window 0,40", 2, "--window width must be at least 1; got 0", id="audit-window-width"),
    pytest.param("audit {img} --group-by scanner,colour", 2, "--group-by: unknown field 'colour'; choose from ",
                 id="audit-group-by"),
    pytest.param("audit {img} --salt=", 2, "--salt is empty, which leaves the case and study keys plain hashes",
                 id="audit-empty-salt"),
    pytest.param("audit {empty_dir}", 2, "no DICOM or image files found", id="audit-nothing-to-read"),
    pytest.param("audit {img} --keep-burned-in-text --trust-burned-in-header", 2,
                 "argument --trust-burned-in-header: not allowed with argument --keep-burned-in-text",
                 id="audit-keep-and-trust-burned-in-text"),
    pytest.param("annotate {empty_dir} --out {out}", 2, "empty: no image files found", id="annotate-nothing-to-read"),
    pytest.param("annotate {root} --out {out}", 2,
                 "no image files in this folder, only in its sub-folders (add --recursive)",
                 id="annotate-not-recursive"),
    pytest.param("annotate {empty_list} --out {out}", 2, "empty.txt: lists no image files", id="annotate-empty-list"),
    pytest.param("audit {img} {missing}", 2, "missing.png: no such file or folder", id="audit-missing"),
    pytest.param("evaluate --testbed 0", 2, "argument --testbed: must be an integer ≥ 1; got 0",
                 id="evaluate-testbed-0"),
    pytest.param("evaluate --steps 0", 2, "argument --steps: must be an integer ≥ 1; got 0", id="evaluate-steps"),
    pytest.param("evaluate --batch-size 0", 2, "must be an integer ≥ 1; got 0", id="evaluate-batch"),
    pytest.param("evaluate --methods rollout,magic", 2, "unknown method 'magic'", id="evaluate-methods"),
    pytest.param("evaluate {dir} --testbed 4", 2, "give a FOLDER or --testbed N, not both", id="evaluate-both"),
    pytest.param("evaluate {dir} --seed 7", 2, "--seed 7 picks the generated testbed's inputs; a FOLDER's images are "
                 "not drawn, so leave --seed out (or give --testbed N instead of the FOLDER)",
                 id="evaluate-folder-seed"),
    pytest.param("evaluate --testbed 1 --seed -1", 2, "argument --seed: must be an integer ≥ 0; got -1",
                 id="evaluate-seed-negative"),
    pytest.param("sanity --testbed 1 --seed -1", 2, "argument --seed: must be an integer ≥ 0; got -1",
                 id="sanity-seed-negative"),
    pytest.param("sanity {dir} --seed 7", 2, "--seed 7 picks the generated testbed's inputs", id="sanity-folder-seed"),
    pytest.param("evaluate --disagree-below 0.5", 2, "--disagree-below flags images by their --disagreement "
                 "correlation; give --disagreement A,B", id="evaluate-disagree-below-alone"),
    pytest.param("evaluate --disagree-below 0", 2, "--disagree-below flags images by their --disagreement "
                 "correlation; give --disagreement A,B", id="evaluate-disagree-below-default-alone"),
    pytest.param("evaluate {missing}", 2, "missing.png: no such folder", id="evaluate-missing"),
    pytest.param("sanity --testbed -3", 2, "must be an integer ≥ 1; got -3", id="sanity-testbed"),
    pytest.param("sanity --start-layer 9 --methods chefer --testbed 2", 2, "--start-layer 9 is out of range",
                 id="sanity-start"),
    pytest.param("compare {img} --model vitroll-shapes", 2, "give at least two --model options",
                 id="compare-one-model"),
    pytest.param("compare {img} --model vitroll-shapes --model vitroll-shapes --checkpoint x", 2,
                 "1 --checkpoint for 2 --model", id="compare-checkpoints"),
    pytest.param("compare {img} --model vitroll-shapes --model vitroll-shapes --alpha 2", 2, "must be in [0, 1]; got 2",
                 id="compare-alpha"),
    pytest.param("compare {img} --model vitroll-shapes --model vitroll-shapes --cmap Jet", 2,
                 "compare: argument --cmap: unknown matplotlib colormap 'Jet' (did you mean jet, jet_r?)",
                 id="compare-cmap"),
    pytest.param("app --cmap nope", 2, "app: argument --cmap: unknown matplotlib colormap 'nope'", id="app-cmap"),
    pytest.param("annotate {dir} --out {out} --cmap nope", 2,
                 "argument --cmap: unknown matplotlib colormap 'nope' (e.g. jet, viridis, inferno, gray)",
                 id="annotate-cmap"),
    pytest.param("caption {img} --cmap virdis", 2, "unknown matplotlib colormap 'virdis' (did you mean viridis,",
                 id="caption-cmap"),
    pytest.param("models --pretrained --bogus", 2, "vitroll: error: models: unrecognized arguments: --bogus (see",
                 id="models-bogus"),
    pytest.param("explain {img}", 2, "argument COMMAND: invalid choice: 'explain' (choose from overlay, annotate,",
                 id="unknown-command"),
    # a misspelling names the closest sub-command, option or choice, and the sub-command it was given to
    pytest.param("overlya {img}", 2, "argument COMMAND: invalid choice: 'overlya'; did you mean overlay? (choose from",
                 id="command-typo"),
    pytest.param("overlay {img} --modell vit_tiny_patch16_224", 2,
                 "vitroll: error: overlay: unrecognized arguments: --modell vit_tiny_patch16_224; did you mean "
                 "--model? (see `vitroll overlay --help`)", id="option-typo"),
    pytest.param("annotate {dir} --out {out} --batch_size=4", 2,
                 "annotate: unrecognized arguments: --batch_size=4; did you mean --batch-size?",
                 id="option-underscore"),
    pytest.param("overlay {img} --method rollot", 2,
                 "argument --method: invalid choice: 'rollot'; did you mean rollout? "
                 "(choose from attention, center,", id="method-typo"),
    pytest.param("evaluate --testbed-kind pair", 2, "invalid choice: 'pair'; did you mean pairs?", id="choice-typo"),
    pytest.param("", 2, "the following arguments are required: COMMAND", id="no-command"),
    # a mistyped option is named before a missing input (argparse said only that IMAGE was required)
    pytest.param("overlay --methd", 2, "vitroll: error: overlay: unrecognized arguments: --methd; did you mean "
                 "--method? (see `vitroll overlay --help`)", id="option-typo-no-input"),
    pytest.param("annotate {dir} --outt {out}", 2, "annotate: unrecognized arguments: --outt; did you mean --out?",
                 id="option-typo-no-out"),
    pytest.param("--nope", 2, "vitroll: error: unrecognized arguments: --nope (see `vitroll --help`)",
                 id="option-no-command"),
    pytest.param("audit --meth rollout", 2, "audit: the following arguments are required: INPUT",
                 id="abbreviation-no-input"),
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """The paths a row's placeholders stand for."""
    folder = tmp_path / "images"
    folder.mkdir()
    (tmp_path / "empty").mkdir()
    Image.open(SHAPE).save(folder / "disk.png")
    (tmp_path / "a-file.txt").write_text("not a folder, not a checkpoint\n")
    (tmp_path / "two.txt").write_text("circle\nsquare\n")
    (tmp_path / "five.txt").write_text("circle\nsquare\ntriangle\ncross\nstar\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "CT_small.dcm").write_bytes(bytes(128) + b"DICM" + bytes(64))  # a Part 10 preamble, then no image
    (tmp_path / "names.json").write_text("{not json")
    torch.save({"model": load_testbed_model().state_dict(), "args": argparse.Namespace(lr=0.1)},
               tmp_path / "namespace.pth")
    torch.save(load_testbed_model(), tmp_path / "whole.pth")
    return {"img": str(folder / "disk.png"), "dir": str(folder), "empty_dir": str(tmp_path / "empty"),
            "out": str(tmp_path / "out"),
            "file": str(tmp_path / "a-file.txt"), "missing": str(tmp_path / "missing.png"),
            "two_names": str(tmp_path / "two.txt"), "five_names": str(tmp_path / "five.txt"),
            "bad_json": str(tmp_path / "names.json"),
            "namespace_checkpoint": str(tmp_path / "namespace.pth"), "whole_model": str(tmp_path / "whole.pth"),
            "root": str(tmp_path),
            "empty_list": str(tmp_path / "empty.txt"),
            "dicom": str(tmp_path / "CT_small.dcm"), "nothing": ""}


def the_error_line(stderr: str) -> str:
    """The one line on stderr, which must be a `vitroll: error: …` line."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("vitroll: error: "), stderr
    return lines[0]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command, expected_code, expected_text", MISTAKES)
def test_mistake_is_one_error_line(command, expected_code, expected_text, files, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default output folders land here
    argv = [part.format(**files) for part in command.split()]
    code, _, err = run(capsys, argv)
    assert code == expected_code, err
    assert expected_text in the_error_line(err)


def test_usage_errors_name_the_sub_command_and_its_help(files, capsys):
    _, _, err = run(capsys, ["audit", files["img"], "--border", "-1"])
    assert the_error_line(err) == ("vitroll: error: audit: argument --border: must be in [0, 0.5); got -1 "
                                   "(see `vitroll audit --help`)")


def test_namespace_checkpoint_is_refused_with_both_ways_forward(files, capsys):
    checkpoint = files["namespace_checkpoint"]
    _, _, err = run(capsys, ["overlay", files["img"], "--checkpoint", checkpoint])
    line = the_error_line(err)
    assert "\x1b" not in line
    assert f"{checkpoint}: holds Python objects (argparse.Namespace) besides tensors" in line
    assert f'python -c "import vitroll.checkpoints as c; c.save_as_safetensors({checkpoint!r})"' in line
    assert "--trust-checkpoint" in line and "arbitrary code" in line


def test_legacy_torch_file_with_objects_is_refused_too(files, tmp_path, capsys):
    legacy = tmp_path / "legacy.pth"
    torch.save({"model": load_testbed_model().state_dict(), "args": argparse.Namespace(lr=0.1)}, legacy,
               _use_new_zipfile_serialization=False)
    _, _, err = run(capsys, ["overlay", files["img"], "--checkpoint", str(legacy)])
    assert (f"{legacy}: holds Python objects besides tensors, and unpickling them can run arbitrary code"
            in the_error_line(err))


def test_start_layer_out_of_range_in_the_python_api():
    model, images = load_testbed_model(), torch.zeros(1, 3, 64, 64)
    for method in (rollout, chefer):
        for start_layer in (4, -1):
            with pytest.raises(ValueError, match=rf"^start_layer={start_layer} is out of range for a model with 4 "
                                                 r"layers \(0…3\)$"):
                method(model, images, start_layer=start_layer)
    assert rollout(model, images, start_layer=3).shape == (1, 8, 8)


def test_a_method_option_is_named_as_it_was_typed():
    """An option with a flag of its own, given with ``--option``, is named so in every message, warnings too; only
    for the command that was given it."""
    with worded_for_the_command_line():
        typed_as_options(["discard_ratio"])
        assert argument("discard_ratio", 0.99) == "--option discard_ratio=0.99"
        assert argument("discard_ratio") == "--option discard_ratio"
        assert method_option("discard_ratio") == "--option discard_ratio"
        assert method_option("start_layer", 9) == "--start-layer 9"
    with worded_for_the_command_line():
        assert argument("discard_ratio", 0.99) == "--discard-ratio 0.99"
    assert argument("discard_ratio", 0.99) == "discard_ratio=0.99"
    typed_as_options(["discard_ratio"])  # outside any command: not carried into the next one
    try:
        with worded_for_the_command_line():
            assert method_option("discard_ratio", 0.99) == "--discard-ratio 0.99"
    finally:
        typed_as_options([])


def test_input_size_must_be_whole_patches_on_a_dynamic_model():
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, dynamic_img_size=True)
    check_input_size(model, (96, 160))
    with pytest.raises(ValueError, match=r"^--input-size 100 160: not a multiple of the model's 16×16 patches$"):
        check_input_size(model, (100, 160))


def test_trust_checkpoint_loads_it_after_a_warning(files, tmp_path, capsys):
    code, out, err = run(capsys, ["overlay", files["img"], "--checkpoint", files["namespace_checkpoint"],
                                  "--trust-checkpoint", "--out", str(tmp_path / "trusted")])
    assert code == 0, err
    assert err.startswith("vitroll: warning: --trust-checkpoint: ") and "arbitrary code" in err
    assert (tmp_path / "trusted" / "disk_rollout.png").is_file()
    assert "1. disk" in out  # the shipped weights, read from the unpickled file: the disk is recognised


def test_converted_checkpoint_loads_without_trust(files, tmp_path, capsys):
    converted = save_as_safetensors(files["namespace_checkpoint"])
    assert converted == tmp_path / "namespace.safetensors"
    code, out, err = run(capsys,
                         ["overlay", files["img"], "--checkpoint", str(converted), "--out", str(tmp_path / "o")])
    assert (code, err) == (0, "")
    assert "1. disk" in out


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE unset"])
def test_hub_model_without_network_is_one_line_within_seconds(offline, files, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_HOME", str(Path(files["dir"]).parent / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(Path(files["dir"]).parent / "empty-cache" / "hub"))
    start = time.perf_counter()
    code, _, err = run(capsys, ["overlay", files["img"], "--model", "hf-hub:vitroll-tests/no-such-model"])
    elapsed = time.perf_counter() - start
    assert code == 2
    assert the_error_line(err).startswith("vitroll: error: hf-hub:vitroll-tests/no-such-model: configuration ")
    assert elapsed < 10, f"{elapsed:.1f} s"


def test_a_bad_file_in_a_batch_does_not_lose_the_good_ones(files, tmp_path, capsys):
    bad = Path(files["dir"]) / "broken.png"
    bad.write_bytes(b"not a png")
    code, _, err = run(capsys, ["overlay", str(bad), files["dicom"], files["img"], "--batch-size", "2",
                                "--out", str(tmp_path / "o")])
    assert code == 3  # some inputs failed, as in caption, text, annotate and audit (was 1)
    assert "Traceback" not in err and err.splitlines() == [
        f"vitroll: failed: {bad}: not an image Pillow can read",
        f"vitroll: failed: {files['dicom']}: a DICOM file: this command reads images; `vitroll audit` explains DICOM "
        "and keeps patient data out of its outputs"]
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["disk_rollout.png"]


def run_into_closed_pipe(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m vitroll ARGV`` with its stdout a pipe whose reader has already gone (``| head -0``)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", PYTHONUNBUFFERED="1")  # the first print fails
    process = subprocess.Popen([sys.executable, "-m", "vitroll", *argv], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.stderr.read()
    return subprocess.CompletedProcess(process.args, process.wait(), None, stderr)


def test_closed_pipe_ends_quietly_and_keeps_the_files(files, tmp_path):
    listing = run_into_closed_pipe("models", cwd=tmp_path)
    assert (listing.returncode, listing.stderr) == (EXIT_BROKEN_PIPE, "")
    overlay = run_into_closed_pipe("overlay", str(SHAPE), files["img"], "--out", "piped", cwd=tmp_path)
    assert (overlay.returncode, overlay.stderr) == (EXIT_BROKEN_PIPE, "")
    # the run stops at the first line it cannot print, after the first image's overlay was written; it stays
    assert sorted(p.name for p in (tmp_path / "piped").iterdir()) == ["shapes_disk_rollout.png"]


def test_ctrl_c_while_the_device_is_checked_is_one_line(files, capsys, monkeypatch):
    """Checking `--device cuda` imports torch while parsing (seconds): a Ctrl-C then printed a 40-line traceback."""
    import vitroll.commands.arguments as arguments

    def interrupted(text: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(arguments, "check_device", interrupted)
    code, out, err = run(capsys, ["overlay", files["img"], "--device", "cuda"])
    assert (code, out, err) == (130, "", "vitroll: interrupted\n")


@pytest.mark.parametrize("command, work", [
    ("evaluate --testbed 2", "vitroll.pipelines.evaluate.evaluate"),
    ("evaluate --testbed-kind pairs --testbed 2", "vitroll.pipelines.evaluate.evaluate_testbed"),
    ("sanity --testbed 2", "vitroll.pipelines.sanity.sanity_check"),
    ("compare {img} --model vitroll-shapes --model vitroll-shapes", "vitroll.pipelines.compare.compare"),
    ("audit {img} --keep-burned-in-text", "vitroll.audit.pipeline.audit_items"),
], ids=["evaluate", "evaluate-pairs", "sanity", "compare", "audit"])
def test_an_output_folder_that_cannot_be_made_stops_the_run_before_its_work(command, work, files, tmp_path, capsys,
                                                                            monkeypatch):
    """evaluate, sanity and audit made --out only to write their results: a folder they could not make (no permission,
    a read-only disk) was told after all the work, which was lost."""
    import importlib

    out = tmp_path / "refused"
    make_folder = Path.mkdir

    def refuse(path: Path, *args, **kwargs) -> None:
        if path == out:
            raise PermissionError(13, "Permission denied", str(path))
        make_folder(path, *args, **kwargs)

    def work_done(*args, **kwargs):
        raise AssertionError("the work ran before the output folder was made")

    module, name = work.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, work_done)
    monkeypatch.setattr(Path, "mkdir", refuse)
    code, _, err = run(capsys, [*(part.format(**files) for part in command.split()), "--out", str(out)])
    assert "Traceback" not in err  # the audit warns about --keep-burned-in-text first
    assert (code, err.splitlines()[-1]) == (2, f"vitroll: error: cannot make the output folder {out} "
                                                "(Permission denied)")
