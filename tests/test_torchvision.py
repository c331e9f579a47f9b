"""torchvision's VisionTransformer through the public registration call, and a hand-written ViT registered by a test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch import nn

import vitroll
from reference import reference_chefer, reference_rollout, reference_torchvision_forward
from vitroll.capture import AttentionRecorder
from vitroll.cli import main
from vitroll.audit.pipeline import run_audit
from vitroll.audit.records import AuditOptions
from vitroll.errors import UnsupportedModelError
from vitroll.metrics import deletion_insertion
from vitroll.pipelines.compare import Explainer, compare
from vitroll.pipelines.evaluate import evaluate, shapes_images
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import annotate
from vitroll.pipelines.sanity import cascade, sanity_check

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "sample_images" / "cat.jpg"

SIZES = {
    "2-layers-2-heads": dict(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=5),
    "3-layers-4-heads": dict(image_size=96, patch_size=16, num_layers=3, num_heads=4, hidden_dim=48, mlp_dim=96,
                             num_classes=7),
    "4-layers-6-heads-patch-8": dict(image_size=48, patch_size=8, num_layers=4, num_heads=6, hidden_dim=48,
                                     mlp_dim=64, num_classes=3),
}


def small_vit(config: dict) -> nn.Module:
    """A torchvision ViT with peaked attention (larger in_proj weights) and a non-zero head (torchvision zeroes it)."""
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(**config)
    with torch.no_grad():
        for layer in model.encoder.layers:
            layer.self_attention.in_proj_weight.normal_(0.0, 0.3)
        model.heads.head.weight.normal_()
    return model.eval()


def images_for(model: nn.Module, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, model.image_size, model.image_size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("size", SIZES)
def test_rollout_matches_the_float64_reference_built_from_in_proj_weight(size):
    model = small_vit(SIZES[size])
    images = images_for(model)
    maps = vitroll.rollout(model, images)
    grid = (model.image_size // model.patch_size,) * 2
    assert maps.shape == (2, *grid)
    with torch.no_grad():
        logits = model(images)
    for index in range(len(images)):
        reference_logits, attentions, _ = reference_torchvision_forward(model, images[index:index + 1], 0)
        assert np.abs(reference_logits - logits[index].numpy()).max() < 1e-4  # the hand-written forward is the model's
        expected = reference_rollout(attentions, num_prefix=1, grid=grid, class_token=True)
        assert expected.std() > 1e-3 * expected.mean()  # peaked enough for the comparison to mean something
        assert np.abs(maps[index].numpy() - expected).max() < 1e-5


@pytest.mark.parametrize("size", ["2-layers-2-heads", "3-layers-4-heads"])
def test_chefer_matches_the_float64_reference_gradients(size):
    model = small_vit(SIZES[size])
    images = images_for(model)
    maps = vitroll.chefer(model, images, target_class=1)
    grid = (model.image_size // model.patch_size,) * 2
    for index in range(len(images)):
        _, attentions, gradients = reference_torchvision_forward(model, images[index:index + 1], 1)
        expected = reference_chefer(attentions, gradients, 1, grid)
        assert np.abs(maps[index].numpy() - expected).max() < 1e-5 * max(1.0, np.abs(expected).max())


def test_recording_leaves_the_output_unchanged_and_every_hook_goes_on_exit():
    model = small_vit(SIZES["3-layers-4-heads"])
    images = images_for(model)
    with torch.no_grad():
        plain = model(images)
        with AttentionRecorder(model) as recorder:
            recorded = model(images)
    assert torch.equal(plain, recorded)  # bit for bit: the call itself is not touched
    assert [tuple(a.shape) for a in recorder.attentions] == [(2, 37, 37)] * 3
    with AttentionRecorder(model, keep_graph=True):
        in_graph = model(images)
    assert (in_graph - plain).abs().max().item() <= 1e-5  # recomputed attention: float rounding only
    with pytest.raises(ZeroDivisionError), AttentionRecorder(model, keep_graph=True):
        model(images)
        1 / 0
    hooks = [(m._forward_pre_hooks, m._forward_hooks) for m in model.modules()]
    assert all(not pre and not post for pre, post in hooks)
    with torch.no_grad():
        assert torch.equal(model(images), plain)


@pytest.mark.parametrize("architecture, build", [("vit_b_16", {}), ("vit_l_16", {}), ("vit_h_14", {"image_size": 518})])
def test_preprocessing_is_the_default_weights_transform(architecture, build):
    with torch.device("meta"):  # the transform depends on the architecture only: no weights needed
        model = torchvision.models.get_model(architecture, **build)
    image = Image.open(PHOTO).convert("RGB")
    tensor, geometry = vitroll.Preprocessing.from_model(model)(image)
    transform = torchvision.models.get_model_weights(architecture).DEFAULT.transforms()
    assert geometry.resized_hw[0] == transform.resize_size[0] and geometry.input_hw == (model.image_size,) * 2
    assert (tensor - transform(image)).abs().max().item() < 1e-5


def test_preprocessing_at_other_sizes_keeps_the_256_to_224_ratio():
    model = small_vit(SIZES["2-layers-2-heads"])
    preprocessing = vitroll.Preprocessing.from_model(model)
    assert (preprocessing.interpolation, preprocessing.mean) == ("bilinear", (0.485, 0.456, 0.406))
    assert preprocessing.geometry((300, 400)).resized_hw == (73, 97)  # floor(64 · 256/224) = 73 on the short side


def test_torchvision_names_refuse_non_square_inputs_in_one_line():
    # torchvision's VisionTransformer asserts height == width == image_size in its forward
    with pytest.raises(vitroll.ModelLoadError) as raised:
        vitroll.load_model("torchvision:vit_b_16", img_size=(64, 96))
    assert str(raised.value) == ("torchvision:vit_b_16: torchvision's ViT takes square inputs only; "
                                 "use img_size=N")


@pytest.mark.parametrize("command", ["overlay", "annotate"])
def test_cli_runs_on_a_torchvision_name(command, tmp_path, capsys):
    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(PHOTO, source / "cat.jpg")
    code = main([command, str(source if command == "annotate" else source / "cat.jpg"), "--model",
                 "torchvision:vit_b_32", "--img-size", "64", "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 0, err
    written = next((tmp_path / "out").rglob("cat*.png"))
    assert np.asarray(Image.open(written)).shape == (*Image.open(PHOTO).size[::-1], 3)
    assert "random weights" in err


def test_sanity_cascade_randomises_the_heads_then_the_encoder_layers_top_down():
    model = small_vit(SIZES["3-layers-4-heads"])
    before = {name: value.clone() for name, value in model.state_dict().items()}
    stages = []
    for stage, randomized in cascade(model):
        changed = {name.split(".")[0] if name.startswith("heads") else ".".join(name.split(".")[:3])
                   for name, value in randomized.state_dict().items() if not torch.equal(value, before[name])}
        stages.append((stage, sorted(changed)))
    layers = [f"encoder.layers.encoder_layer_{index}" for index in (2, 1, 0)]
    assert [stage for stage, _ in stages] == ["heads", *layers]
    assert stages[1][1] == sorted(["heads", layers[0]]) and stages[-1][1] == sorted(["heads", *layers])
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())


def test_sanity_on_a_torchvision_vit_keeps_the_baseline_and_changes_rollout():
    model = small_vit(SIZES["2-layers-2-heads"])
    result = sanity_check(model, images_for(model, 3), ["rollout", "center"])
    assert result.stages == ["heads", "encoder.layers.encoder_layer_1", "encoder.layers.encoder_layer_0"]
    assert result.correlations["center"].shape == (3, 3) and np.allclose(result.correlations["center"], 1.0)
    assert result.correlations["rollout"][-1].mean() < 0.9 and "center" in result.flagged()


@pytest.mark.parametrize("command", ["sanity", "evaluate"])
def test_cli_sanity_and_evaluate_run_on_a_torchvision_name(command, tmp_path, capsys):
    steps = ["--steps", "4"] if command == "evaluate" else []
    code = main([command, "--testbed", "3", "--methods", "rollout,center", "--model", "torchvision:vit_b_32",
                 "--img-size", "64", *steps, "--out", str(tmp_path), "--device", "cpu"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    table = (tmp_path / f"{command if command == 'sanity' else 'summary'}.csv").read_text().splitlines()
    assert table[0].startswith("method,") and sorted(line.split(",")[0] for line in table[1:]) == ["center", "rollout"]
    if command == "sanity":
        assert table[0].split(",")[1:3] == ["heads", "encoder.layers.encoder_layer_11"]


def test_evaluate_scores_a_torchvision_vit_on_testbed_images():
    model = small_vit(SIZES["2-layers-2-heads"])
    result = evaluate(model, shapes_images(3), ["rollout"], steps=4)
    assert [row["image"] for row in result.rows] == [item.name for item in shapes_images(3)]
    for row in result.rows:
        assert 0 <= row["energy_in_mask"] <= 1 and row["predicted"] in range(5)
        assert 0 <= row["deletion_auc"] <= 1 and 0 <= row["insertion_auc"] <= 1


def test_compare_puts_a_timm_and_a_torchvision_vit_on_the_same_pixels():
    import timm

    torchvision_vit = small_vit(SIZES["3-layers-4-heads"])
    timm_vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=5).eval()
    explainers = [Explainer(label, model, vitroll.Preprocessing.from_model(model))
                  for label, model in (("timm", timm_vit), ("torchvision", torchvision_vit),
                                       ("torchvision-again", torchvision_vit))]
    result = compare([PHOTO, ROOT / "sample_images" / "rocket.jpg"], explainers, ExplainSettings(method="rollout"))
    assert not result.errors and len(result.images) == 2
    for label in ("timm", "torchvision"):
        assert [m.shape for m in result.maps[label]] == [p.shape[:2] for p in result.pictures]
    pairs = {(row["model_a"], row["model_b"]): row for row in result.rows if row["image"] == str(PHOTO)}
    assert pairs[("torchvision", "torchvision-again")]["spearman"] == pytest.approx(1.0)
    assert -1 <= pairs[("timm", "torchvision")]["spearman"] < 0.99


def test_audit_runs_on_a_torchvision_vit(tmp_path):
    import pydicom.data

    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(pydicom.data.get_testdata_file("CT_small.dcm"), source / "ct.dcm")
    shutil.copy(PHOTO, source / "cat.jpg")
    model = small_vit(SIZES["2-layers-2-heads"])
    report = run_audit([source], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="rollout"),
                       options=AuditOptions(keep_burned_in_text=True))
    assert len(report.rows) == 2 and not report.errors
    assert sorted(row.size_hw for row in report.rows) == [(128, 128), Image.open(PHOTO).size[::-1]]
    ct = next(row for row in report.rows if row.size_hw == (128, 128))
    assert 0 < ct.metrics["outside_body"] < 1 and ct.prediction.startswith("class ")
    for row in report.rows:
        assert Image.open(tmp_path / "out" / row.overlay_file).size == row.size_hw[::-1]


def test_cli_audit_runs_on_a_torchvision_name(tmp_path, capsys):
    import csv

    import pydicom.data

    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(pydicom.data.get_testdata_file("CT_small.dcm"), source / "ct.dcm")
    code = main(["audit", str(source), "--model", "torchvision:vit_b_32", "--img-size", "64", "--keep-burned-in-text",
                 "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    [row] = list(csv.DictReader((tmp_path / "out" / "report.csv").open(encoding="utf-8")))
    assert (row["status"], row["model"], row["weights"], row["height"]) == ("ok", "torchvision:vit_b_32", "random",
                                                                            "128")
    assert 0 < float(row["outside_body"]) < 1


class TinyAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.qkv, self.probs, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Identity(), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        attention = self.probs((q @ k.transpose(-2, -1) * (dim // self.heads) ** -0.5).softmax(dim=-1))
        return self.proj((attention @ v).transpose(1, 2).reshape(batch, tokens, dim))


class TinyViT(nn.Module):
    def __init__(self, size: int = 32, patch: int = 8, dim: int = 32, depth: int = 3, heads: int = 4) -> None:
        super().__init__()
        self.patch, self.embed = patch, nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 1 + (size // patch) ** 2, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.attns = nn.ModuleList(TinyAttention(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos
        for norm, attention in zip(self.norms, self.attns):
            x = x + attention(norm(x))
        return self.head(x[:, 0])


vitroll.register_family(
    "tiny-test-vit", TinyViT,
    attention_modules=lambda model: list(model.attns),
    token_layout=lambda model, hw: vitroll.TokenLayout(1, "class_token", (hw[0] // model.patch, hw[1] // model.patch)),
    preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3),
    readout=vitroll.AttentionReadout(TinyAttention, probs_module="probs", fused_flag=None),
)


def tiny_reference(model: TinyViT, image: torch.Tensor, target: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """ONE image in float64: per layer the attention (H, N, N) and ∂ logit ``target`` / ∂ attention."""
    reference = TinyViT()
    reference.load_state_dict(model.state_dict())
    reference.double()
    kept: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        kept.append(output)

    for attention in reference.attns:
        attention.probs.register_forward_hook(keep)
    reference(image.double())[0, target].backward()
    return [a[0].detach().numpy() for a in kept], [a.grad[0].numpy() for a in kept]


def test_a_hand_written_vit_registered_through_the_public_call(tmp_path):
    torch.manual_seed(3)
    model = TinyViT().eval()
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    rollout_maps, chefer_maps = vitroll.rollout(model, images), vitroll.chefer(model, images, target_class=2)
    for index in range(2):
        attentions, gradients = tiny_reference(model, images[index:index + 1], 2)
        expected = reference_rollout(attentions, num_prefix=1, grid=(4, 4), class_token=True)
        assert np.abs(rollout_maps[index].numpy() - expected).max() < 1e-5
        expected = reference_chefer(attentions, gradients, 1, (4, 4))
        assert np.abs(chefer_maps[index].numpy() - expected).max() < 1e-5 * max(1.0, np.abs(expected).max())

    source = tmp_path / "in"
    source.mkdir()
    for name in ("cat.jpg", "rocket.jpg"):
        shutil.copy(ROOT / "sample_images" / name, source / name)
    summary = annotate(source, tmp_path / "out", model, ExplainSettings(method="chefer"), identity={"model": "tiny"})
    rows = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert summary.ok == 2 and sorted(row["path"] for row in rows) == ["cat.jpg", "rocket.jpg"]
    for row in rows:
        picture = Image.open(tmp_path / "out" / row["overlay"])
        assert (row["status"], picture.size) == ("ok", (row["width"], row["height"]))

    torchvision_vit = small_vit(SIZES["2-layers-2-heads"])
    explainers = [Explainer(label, each, vitroll.Preprocessing.from_model(each))
                  for label, each in (("tiny", model), ("tiny-again", model), ("torchvision", torchvision_vit))]
    compared = compare(sorted(source.iterdir()), explainers, ExplainSettings(method="chefer"))
    assert not compared.errors and [path.name for path in compared.images] == ["cat.jpg", "rocket.jpg"]
    assert [m.shape for m in compared.maps["tiny"]] == [p.shape[:2] for p in compared.pictures]
    agreement = {(row["model_a"], row["model_b"], Path(row["image"]).name): row["spearman"] for row in compared.rows}
    assert len(agreement) == 6
    assert agreement["tiny", "tiny-again", "cat.jpg"] == pytest.approx(1.0)
    assert agreement["tiny", "torchvision", "cat.jpg"] < 0.99


class TinyViTWithOutputs(TinyViT):
    """The same network, returning an output object as Hugging Face models do."""

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": super().forward(images)}


vitroll.register_family(
    "tiny-test-vit-outputs", TinyViTWithOutputs,
    attention_modules=lambda model: list(model.attns),
    token_layout=lambda model, hw: vitroll.TokenLayout(1, "class_token", (hw[0] // model.patch, hw[1] // model.patch)),
    preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3),
    logits=lambda model, images: model(images)["logits"],
    class_names=lambda model: ["north", "east", "south", "west"],
)


def test_a_family_says_where_the_logits_of_an_output_object_are_and_what_the_classes_are_called():
    torch.manual_seed(3)
    plain = TinyViT().eval()
    wrapped = TinyViTWithOutputs().eval()
    wrapped.load_state_dict(plain.state_dict())
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    for method in ("rollout", "chefer", "grad_rollout"):
        expected, got = getattr(vitroll, method)(plain, images), getattr(vitroll, method)(wrapped, images)
        assert torch.equal(got, expected), method
    plain_scores = deletion_insertion(plain, images, vitroll.rollout(plain, images), targets=[0, 1], steps=4)
    wrapped_scores = deletion_insertion(wrapped, images, vitroll.rollout(wrapped, images), targets=[0, 1], steps=4)
    np.testing.assert_array_equal(wrapped_scores.deletion, plain_scores.deletion)
    assert vitroll.class_names(wrapped) == ["north", "east", "south", "west"]
    assert vitroll.class_names(plain) is None


def test_sanity_refuses_a_family_that_names_nothing_to_randomise_in_one_line():
    with pytest.raises(UnsupportedModelError) as raised:
        sanity_check(TinyViT().eval(), torch.zeros(1, 3, 32, 32), ["rollout"])
    assert str(raised.value) == (
        "sanity: the tiny-test-vit family does not say what a randomisation check re-initialises; register it with "
        "register_family(..., randomizable=lambda model: [head, *blocks from the last to the first])")


def test_pretrained_offline_and_uncached_is_one_error_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(vitroll.models.hub, "host_reachable", lambda host, port, timeout: False)
    code = main(["overlay", str(PHOTO), "--model", "torchvision:vit_b_16", "--pretrained", "--out", str(tmp_path)])
    assert code != 0
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: error: torchvision:vit_b_16: torchvision's pretrained weights are not in {tmp_path / 'checkpoints'} "
        "and download.pytorch.org cannot be reached; pass --checkpoint FILE or run once with network access"]


def test_an_input_size_the_model_cannot_take_is_refused_before_the_run(tmp_path, capsys):
    code = main(["overlay", str(PHOTO), "--model", "torchvision:vit_b_32", "--img-size", "64",
                 "--input-size", "96", "96", "--out", str(tmp_path)])
    assert code != 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        "vitroll: error: --input-size 96 96: torchvision's VisionTransformer takes 64×64 inputs only (its image_size); "
        "--img-size N builds it for N×N")
    assert not list(tmp_path.iterdir())


def test_an_image_size_the_model_cannot_take_is_refused_from_python_naming_the_keyword():
    model = small_vit(SIZES["2-layers-2-heads"])
    with pytest.raises(ValueError) as raised:
        vitroll.rollout(model, torch.randn(1, 3, 96, 96))
    assert str(raised.value) == ("images of 96×96 do not fit the model: torchvision's VisionTransformer takes 64×64 "
                                 "inputs only (its image_size); img_size=N builds it for N×N")


def test_a_checkpoint_trained_at_another_size_names_the_img_size_to_build_with(tmp_path):
    path = tmp_path / "small.pth"
    torch.save(torchvision.models.vit_b_32(image_size=64, num_classes=3).state_dict(), path)
    with pytest.raises(vitroll.ModelLoadError) as raised:
        vitroll.load_model("torchvision:vit_b_32", checkpoint=path)
    assert str(raised.value) == (f"{path}: checkpoint does not match VisionTransformer — shape mismatch: "
                                 "encoder.pos_embedding (1, 5, 768) vs model (1, 50, 768); its position embedding is "
                                 "for 64×64 inputs: build the model for them with img_size=64")
    assert vitroll.load_model("torchvision:vit_b_32", checkpoint=path, img_size=64).image_size == 64


class TinyViTWithMaskHead(nn.Module):
    """TinyViT with a dense head over its patch grid, registered before the patch embedding: the model's first
    ``Conv2d`` takes 32 channels (the tokens'), its images 3."""

    def __init__(self) -> None:
        super().__init__()
        self.mask_head = nn.Conv2d(32, 1, 1)
        self.vit = TinyViT()
        self.patch = self.vit.patch

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grid = self.vit.embed(images)
        return self.vit(images) + self.mask_head(grid).mean(dim=(1, 2, 3))[:, None]


vitroll.register_family(
    "tiny-test-vit-mask-head", TinyViTWithMaskHead,
    attention_modules=lambda model: list(model.vit.attns),
    token_layout=lambda model, hw: vitroll.TokenLayout(1, "class_token", (hw[0] // model.patch, hw[1] // model.patch)),
    preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3),
    input_embedding=lambda model: model.vit.embed,
)


def test_a_family_names_the_module_images_enter_when_its_first_convolution_is_another():
    """The channel check read the model's first Conv2d (here the mask head's 32 channels) and refused every RGB
    batch; the family's ``input_embedding`` says where the images go in."""
    torch.manual_seed(4)
    model = TinyViTWithMaskHead().eval()
    assert next(module for module in model.modules() if isinstance(module, nn.Conv2d)) is model.mask_head
    assert vitroll.rollout(model, torch.randn(2, 3, 32, 32)).shape == (2, 4, 4)
    assert vitroll.chefer(model, ROOT / "sample_images" / "cat.jpg").shape == (1, 4, 4)
    with pytest.raises(ValueError) as raised:
        vitroll.rollout(model, torch.randn(2, 32, 32, 32))
    assert str(raised.value) == (
        "images of shape (2, 32, 32, 32) have 32 channels; the model takes (B, 3, H, W): pass pictures as uint8 "
        "arrays, PIL images or paths to have them converted to RGB and preprocessed")
