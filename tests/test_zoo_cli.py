"""CLI side of the zoo: ``vitroll models``, preprocessing overrides, the offline fast failure, non-ViT refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

import vitroll
from vitroll.capture import recorder
from vitroll.cli import build_parser, main
from vitroll.commands.common import preprocessing_from_args
from vitroll.errors import UnsupportedModelError

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "sample_images" / "cat.jpg"


def test_models_lists_families_and_marks_matches(capsys):
    assert main(["models", "deit*"]) == 0
    out = capsys.readouterr().out
    for family in ("vit", "eva", "beit", "cait"):
        assert f"\n  {family} " in out
    assert "supported    deit_tiny_distilled_patch16_224" in out
    assert "supported    deit3_small_patch16_224" in out
    assert main(["models", "vitamin_small*"]) == 0
    assert "supported    vitamin_small_224" in capsys.readouterr().out
    assert f"{len(timm.list_models('deit*'))} timm models match 'deit*'" in out

    assert main(["models", "*_tiny_*"]) == 0
    out = capsys.readouterr().out
    assert "unsupported  swin_tiny_patch4_window7_224" in out
    assert "unsupported  convnext_tiny" in out
    assert "supported    eva02_tiny_patch14_224" in out and "supported    vit_tiny_patch16_224" in out


def test_models_wraps_its_lists_to_the_terminal_and_keeps_one_line_per_row_when_piped(capsys, monkeypatch):
    """The family names sat in a 5-character column that most overran (hf-dinov2-registers pushed its text 14
    characters right), and every line ran on past any terminal's edge. The names now share one column as wide as the
    longest; on a terminal the text wraps under itself to its width, piped each row stays one line to grep."""
    from vitroll.capture.families import FAMILIES

    assert main(["models"]) == 0
    piped = capsys.readouterr().out.splitlines()
    rows = [line for line in piped if line.startswith("  ")]
    assert len(rows) == len(FAMILIES) + 5
    column = 2 + max(len(family.name) for family in FAMILIES) + 2  # hf-metaclip2-classifier: 23, or a test's own
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in rows if len(line) > column)
    assert any(line.startswith("  hf-dinov2-registers      Dinov2WithRegistersModel, ") for line in rows)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    for columns in (80, 120):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert main(["models"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert max(map(len, lines)) <= columns
        continued = [line for line in lines if line.startswith("   ")]
        assert continued and all(line[:column].isspace() and line[column] != " " for line in continued)
    assert lines[1:3] == [
        "  vitroll-shapes           four-shape image classifier, the default --model: overlay, compare, annotate, "
        "evaluate,",
        "                           sanity"]
    monkeypatch.setenv("COLUMNS", "50")  # too narrow for a column: each text under its name
    assert main(["models"]) == 0
    assert capsys.readouterr().out.splitlines()[1:3] == ["  vitroll-shapes", "      four-shape image classifier, the "
                                                         "default"]


def test_the_eva_and_beit_notes_say_what_holds(capsys, monkeypatch):
    assert main(["models", "vit_pe_core_tiny*"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ("  eva                      eva02_*, eva_*, vit_*_rope_* — rotary embedding included (blocked kernel on "
            "the rotated queries and keys); class/register tokens skipped; avg pooling → patch mean; 'map' head → pool "
            "attention; timm's "
            "other Eva models (vit_pe_*, *_dinov3*) too") in out
    assert ("  beit                     beit_*, beitv2_* — relative position bias included (the blocked kernel's "
            "mask); avg pooling (default) → patch mean, 'token' → class token; --img-size resamples the bias, no "
            "--dynamic-img-size (timm's Beit has none)") in out
    assert "  supported    vit_pe_core_tiny_patch16_384" in out
    from vitroll.capture import family_of

    small = dict(pretrained=False, depth=1, num_classes=3)
    for pool, readout in (("avg", "patch_mean"), ("map", "attention_pool"), ("token", "class_token")):
        eva = timm.create_model("eva02_tiny_patch14_224", global_pool=pool, img_size=28, **small)
        assert family_of(eva).token_layout(eva, (28, 28)).readout == readout
    for pool, readout in (("avg", "patch_mean"), ("token", "class_token")):
        beit = timm.create_model("beit_base_patch16_224", global_pool=pool, img_size=32, embed_dim=32, num_heads=2,
                                 **small)
        assert family_of(beit).token_layout(beit, (32, 32)).readout == readout
    with pytest.raises(TypeError, match="dynamic_img_size"):
        timm.create_model("beit_base_patch16_224", dynamic_img_size=True, **small)
    with pytest.raises(ValueError) as refused:  # so the size hint offers only img_size
        family_of(beit).token_layout(beit, (48, 48))
    assert str(refused.value) == "Beit was built for 32×32 inputs; build it for this size with img_size=(48, 48)"
    swapped = []  # both record through the blocked kernel in place of their fused call, as the notes say
    swap = recorder.attach_kernel_swap
    monkeypatch.setattr(recorder, "attach_kernel_swap",
                        lambda module, *a, **k: swapped.append(module) or swap(module, *a, **k))
    vitroll.rollout(eva, torch.randn(1, 3, 28, 28))
    vitroll.rollout(beit, torch.randn(1, 3, 32, 32))
    assert swapped == [eva.blocks[0].attn, beit.blocks[0].attn]


def test_preprocessing_overrides_reach_the_transform():
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, dynamic_img_size=True)
    args = build_parser().parse_args([
        "overlay", "x.png", "--model", "vit_tiny_patch16_224", "--dynamic-img-size", "--input-size", "160", "128",
        "--mean", "0.1", "0.2", "0.3", "--std", "0.4", "0.5", "0.6", "--interpolation", "bilinear", "--crop-pct", "1",
    ])
    pre = preprocessing_from_args(model, args)
    assert (pre.input_size, pre.mean, pre.std, pre.interpolation, pre.crop_pct) == (
        (160, 128), (0.1, 0.2, 0.3), (0.4, 0.5, 0.6), "bilinear", 1.0)
    tensor, geometry = pre(Image.open(PHOTO).convert("RGB"))
    assert tensor.shape == (3, 160, 128) and geometry.input_hw == (160, 128)


def test_dynamic_model_overlay_at_another_input_size(tmp_path, capsys):
    code = main(["overlay", str(PHOTO), "--model", "vit_tiny_patch16_224", "--dynamic-img-size",
                 "--input-size", "96", "160", "--out", str(tmp_path)])
    assert code == 0 and (tmp_path / "cat_rollout.png").exists()


@pytest.mark.parametrize("weights", [[], ["--pretrained"]])
@pytest.mark.parametrize(("name", "module"), [("resnet18", "resnet"),
                                              ("volo_d1_224", "volo"),
                                              ("tnt_s_patch16_224", "tnt")])
def test_a_timm_model_of_no_family_is_refused_by_name_before_it_is_built(tmp_path, capsys, monkeypatch, weights,
                                                                        name, module):
    """The model was built (seconds for swin_large) and, with --pretrained, its weights fetched before the refusal;
    offline the message was then about the uncached weights of a model that could not be explained anyway."""

    def not_to_be_built(*args, **kwargs):
        raise AssertionError("a model of no family was built")

    monkeypatch.setattr(timm, "create_model", not_to_be_built)
    code = main(["overlay", str(PHOTO), "--model", name, *weights, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"vitroll: error: {name} (timm.models.{module}) has no token attention that vitroll "
                             "can read; supported timm families: vit (vit_*, deit_*")
    assert ("cait (cait_*) (`vitroll models` lists their names and the torchvision, Hugging Face and open_clip "
            "families). For CNNs") in err[0] and err[0].endswith("use Grad-CAM (pip install grad-cam).")
    assert "hf-vit" not in err[0] and len(err[0]) < 700, err[0]  # every family was listed: 1,900 characters
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("weights", [[], ["--pretrained"]])
@pytest.mark.parametrize(("name", "module", "why"), [
    ("swin_large_patch4_window12_384", "swin_transformer", "Swin attends within shifted windows and merges patches"),
    ("levit_128s", "levit", "LeViT subsamples its tokens between stages"),
    ("mvitv2_tiny", "mvitv2", "MViTv2 pools its queries, keys and values"),
    ("xcit_nano_12_p16_224", "xcit", "XCiT's cross-covariance attention mixes channels, not tokens"),
    ("pit_ti_distilled_224", "pit", "PiT pools its tokens into a coarser grid between stages"),
])
def test_a_timm_model_with_windows_stages_or_channel_attention_is_refused_by_name_saying_why(
        tmp_path, capsys, monkeypatch, weights, name, module, why):
    """These were refused with the list of supported families, as if vitroll had never heard of them: now the line
    says what in the model stops rollout, before anything is built."""
    monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: pytest.fail("a refused model was built"))
    code = main(["overlay", str(PHOTO), "--model", name, *weights, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"vitroll: error: {name} (timm.models.{module}): {why}")
    assert err[0].endswith(": no single token sequence runs from the image to the class score for rollout to follow; "
                           "use Grad-CAM (pip install grad-cam)")
    assert not list(tmp_path.iterdir())


def test_a_timm_model_of_no_family_is_refused_by_name_before_its_checkpoint_is_read(tmp_path, capsys, monkeypatch):
    """The whole --checkpoint was read (seconds and gigabytes for a large one) before the name was refused."""
    import vitroll.models.load

    def not_to_be_read(*args, **kwargs):
        raise AssertionError("the checkpoint of a model of no family was read")

    monkeypatch.setattr(vitroll.models.load, "read_checkpoint", not_to_be_read)
    checkpoint = tmp_path / "big.pth"
    checkpoint.write_bytes(b"not read")
    code = main(["overlay", str(PHOTO), "--model", "swin_tiny_patch4_window7_224", "--checkpoint", str(checkpoint),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("vitroll: error: swin_tiny_patch4_window7_224 (timm.models.swin_transformer): Swin "
                             "attends within shifted windows")


def test_the_name_check_refuses_exactly_the_names_vitroll_lists_as_unsupported():
    """Deciding by the timm module refuses no model a family explains, and `vitroll models` says the same. (Every
    timm 1.0.31 model, built on the meta device, was checked once: the refused ones build no family's class.)"""
    from vitroll.models.timm import refuse_unexplained_name, supported_timm_names

    refused = set()
    for name in timm.list_models():
        try:
            refuse_unexplained_name(name)
        except UnsupportedModelError:
            refused.add(name)
    assert refused == set(timm.list_models()) - supported_timm_names()
    assert {"swin_tiny_patch4_window7_224", "tnt_s_patch16_224", "xcit_nano_12_p16_224"} <= refused
    assert not {"naflexvit_base_patch16_gap", "vit_relpos_base_patch16_224"} & refused


@pytest.mark.parametrize(("typed", "line"), [
    ("vit_tinny", "did you mean vit_tiny_patch16_224, vit_tiny_patch16_384, vit_tiny_r_s16_p8_224?"),
    ("deit_smal", "did you mean deit_small_patch16_224, deit_small_distilled_patch16_224, deit3_small_patch16_224?"),
    ("swin_tinny", "the close timm names swin_tiny_patch4_window7_224, swinv2_tiny_window8_256, "
                   "swinv2_tiny_window16_256 are models vitroll cannot explain (`vitroll models PATTERN` marks the "
                   "supported ones)"),
])
def test_a_mistyped_name_is_offered_the_close_names_vitroll_explains(tmp_path, capsys, typed, line):
    """vit_tinny was offered gcvit_tiny, davit_tiny, mvitv2_tiny: timm models that vitroll then refuses."""
    code = main(["overlay", str(PHOTO), "--model", typed, "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"vitroll: error: unknown model name {typed!r}; {line}"


def test_every_timm_module_building_a_family_class_is_a_family_module():
    """The suggestions and `vitroll models` tell support by timm module, without building models: a module that
    builds a family's class (vitamin builds VisionTransformer) but is not listed would hide supported names."""
    import importlib
    import inspect

    from timm.models._registry import _module_to_models

    from vitroll.capture.families import FAMILIES

    listed = {module for family in FAMILIES for module in family.timm_modules}
    classes = tuple(kind for family in FAMILIES if family.timm_modules for kind in family.model_types
                    if isinstance(kind, type))
    building = {module for module in _module_to_models
                if any(inspect.isclass(member) and issubclass(member, classes)
                       for member in vars(importlib.import_module(f"timm.models.{module}")).values())}
    assert building == listed


def test_offline_pretrained_fails_fast(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), TORCH_HOME=str(tmp_path / "torch"),
               PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import timm, vitroll.cli"], env=env, check=True)
    imports = time.perf_counter() - start  # on a loaded machine starting Python and torch alone takes many seconds
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vitroll", "overlay", str(PHOTO), "--model", "vit_base_patch16_224",
                           "--pretrained", "--out", str(tmp_path)], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start - imports
    print(f"offline --pretrained failure {elapsed:.2f} s after the imports ({imports:.2f} s)")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "vitroll: error: vit_base_patch16_224: pretrained weights are not in the local cache and the hub cannot be "
        "reached; pass --checkpoint FILE (.safetensors/.pth) or run once with network access")
    assert elapsed < 25.0  # huggingface_hub retries for ~52 s when it is not told the hub is unreachable


def test_an_option_the_model_does_not_take_is_named_with_pretrained_not_blamed_on_the_hub(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.setattr("vitroll.models.hub.hub_reachable", lambda timeout=3.0: True)  # timm builds before it fetches
    code = main(["overlay", str(PHOTO), "--model", "cait_xxs24_224", "--pretrained", "--dynamic-img-size",
                 "--out", str(tmp_path)])
    assert code == 2 and capsys.readouterr().err == (  # it said: pretrained weights could not be fetched (TypeError)
        "vitroll: error: cait_xxs24_224: cannot build model (TypeError: Cait.__init__() got an unexpected keyword "
        "argument 'dynamic_img_size')\n")


@pytest.mark.parametrize("method", ["chefer", "grad_rollout"])
def test_cait_gradient_methods_overlay(tmp_path, capsys, method):
    code = main(["overlay", str(PHOTO), "--model", "cait_xxs24_224", "--img-size", "64", "--method", method,
                 "--out", str(tmp_path)])
    assert code == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "vitroll: note: cait_xxs24_224 has random weights (no --pretrained or --checkpoint); its maps mean nothing"]
    assert Image.open(tmp_path / f"cat_{method}.png").size == Image.open(PHOTO).size


@pytest.fixture
def resnet_on_hub(tmp_path, monkeypatch) -> str:
    """A ``hf-hub:`` name whose config.json (in the local hub cache, the hub unreachable) names resnet18."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--vitroll-tests--resnet-on-hub" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 10,
                                                      "pretrained_cfg": {"input_size": [3, 224, 224]}}))
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return "hf-hub:vitroll-tests/resnet-on-hub"


@pytest.mark.parametrize("weights", [[], ["--pretrained"], ["--checkpoint", "big.pth"]])
def test_a_hub_model_of_no_family_is_refused_by_its_hub_config_before_it_is_built(tmp_path, capsys, monkeypatch,
                                                                                  resnet_on_hub, weights):
    """An ``hf-hub:`` name was built (and with --pretrained its weights downloaded) before the refusal, and its
    --checkpoint read in full (seconds and gigabytes for a large one) before that."""
    import vitroll.models.load

    def not_to_be_built(*args, **kwargs):
        raise AssertionError("a model of no family was built")

    def not_to_be_read(*args, **kwargs):
        raise AssertionError("the checkpoint of a model of no family was read")

    monkeypatch.setattr(timm, "create_model", not_to_be_built)
    monkeypatch.setattr(vitroll.models.load, "read_checkpoint", not_to_be_read)
    (tmp_path / "big.pth").write_bytes(b"not read")
    monkeypatch.chdir(tmp_path)
    code = main(["overlay", str(PHOTO), "--model", resnet_on_hub, *weights, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("vitroll: error: hf-hub:vitroll-tests/resnet-on-hub (resnet18, timm.models.resnet) has "
                             "no token attention that vitroll can read; supported timm families: vit (vit_*")
    assert not (tmp_path / "out").exists()


def test_models_lists_every_shipped_model_first(capsys):
    from vitroll.commands.models import SHIPPED_MODELS
    from vitroll.models import SHIPPED_TRANSFORMERS

    assert set(SHIPPED_MODELS) == {"vitroll-shapes", *SHIPPED_TRANSFORMERS}
    assert main(["models", "no-such-model*"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Shipped with vitroll (offline):\n  vitroll-shapes ")
    assert "\n  vitroll-caption-shapes   captioner of two-shape images: caption" in out
    assert out.endswith("\n0 timm models match 'no-such-model*' (0 supported)\n")
