"""transformers models by name: save_pretrained folders through the CLI and the Python API, --checkpoint on a config,
class names from id2label, provenance, and each loading mistake's one line."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

transformers = pytest.importorskip("transformers")

import vitroll  # noqa: E402
from vitroll.checkpoints import read_checkpoint  # noqa: E402
from vitroll.cli import main  # noqa: E402
from vitroll.errors import ModelLoadError  # noqa: E402
from vitroll.models import ModelProvenance, class_names, is_transformers_name, load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "sample_images" / "cat.jpg"
LABELS = {0: "tabby", 1: "lynx", 2: "owl"}


def tiny_config(**overrides: object) -> "transformers.ViTConfig":
    settings = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    settings.update(overrides)
    return transformers.ViTConfig(**settings)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(tiny_config()).eval()
    path = tmp_path_factory.mktemp("vit") / "tiny-vit"
    model.save_pretrained(path)
    return path


def test_the_name_rule_tells_transformers_from_timm_and_paths(folder, tmp_path):
    assert is_transformers_name(str(folder)) and is_transformers_name("transformers:vit_small_patch16_224")
    assert is_transformers_name("google/vit-base-patch16-224")
    assert not is_transformers_name("vit_small_patch16_224")
    assert not is_transformers_name("hf-hub:timm/vit_small_patch16_224.augreg_in21k")
    assert not is_transformers_name("torchvision:vit_b_16")
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")
    assert not is_transformers_name(str(weights))


def test_a_folder_loads_with_its_weights_class_names_and_provenance(folder):
    model = load_model(str(folder))
    saved = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    images = torch.randn(2, 3, 32, 32)
    assert torch.allclose(model(pixel_values=images).logits, saved(pixel_values=images).logits, atol=1e-6)
    assert model.config._attn_implementation == "sdpa"
    assert class_names(model) == ["tabby", "lynx", "owl"]
    from_path = load_model(folder)  # a pathlib.Path, as folders often are in Python (was an AttributeError)
    assert all(torch.equal(value, model.state_dict()[name]) for name, value in from_path.state_dict().items())
    provenance = ModelProvenance.of(str(folder), pretrained=False, checkpoint=None)
    assert provenance.weights == "transformers-pretrained" and not provenance.random
    import hashlib
    assert provenance.sha256 == hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_a_sharded_folder_is_fingerprinted_by_every_shard(tmp_path):
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(tiny_config()).eval()
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="20KB")
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) >= 2 and (sharded / "model.safetensors.index.json").is_file()
    before = ModelProvenance.of(str(sharded), pretrained=False, checkpoint=None).sha256

    with torch.no_grad():  # retrain one weight: only a shard changes, the index stays byte for byte
        model.classifier.bias.add_(1.0)
    index = (sharded / "model.safetensors.index.json").read_bytes()
    model.save_pretrained(sharded, max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").read_bytes() == index
    after = ModelProvenance.of(str(sharded), pretrained=False, checkpoint=None).sha256
    assert before is not None and after is not None and after != before
    assert after == ModelProvenance.of(str(sharded), pretrained=False, checkpoint=None).sha256


def test_checkpoint_is_a_state_dict_on_top_of_a_config_folder(folder, tmp_path):
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(folder / "config.json", config_only)
    torch.manual_seed(1)
    trained = transformers.ViTForImageClassification(tiny_config()).eval()
    checkpoint = tmp_path / "trained.pth"
    torch.save(trained.state_dict(), checkpoint)
    model = load_model(str(config_only), checkpoint=checkpoint)
    images = torch.randn(1, 3, 32, 32)
    assert torch.equal(model(pixel_values=images).logits, trained(pixel_values=images).logits)
    assert ModelProvenance.of(str(config_only), pretrained=False, checkpoint=checkpoint).weights == "checkpoint"


@pytest.mark.parametrize("name", ["vitroll-clip-shapes", "vitroll-caption-shapes"])
def test_an_image_text_model_or_a_captioner_takes_a_checkpoint(name, tmp_path):
    """Their classes are model classes, not auto classes: --checkpoint was refused with "cannot load the transformers
    model (AttributeError: type object 'CLIPModel' has no attribute 'from_config')"."""
    shipped = load_model(name)
    trained = {key: value + 0.01 if value.is_floating_point() else value for key, value in shipped.state_dict().items()}
    torch.save(trained, tmp_path / "trained.pth")
    model = load_model(name, checkpoint=tmp_path / "trained.pth")
    assert all(torch.equal(value, trained[key]) for key, value in model.state_dict().items())


def test_the_weights_file_save_pretrained_wrote_loads_as_a_checkpoint_and_a_renamed_one_is_named(folder, tmp_path,
                                                                                                  capsys):
    """save_pretrained writes the keys in transformers' older layout (vit.encoder.layer.0.attention.attention.key),
    which transformers renames on load: the folder's own model.safetensors given as --checkpoint on its config did not
    match its model (missing vit.layers.0.attention.q_proj.weight …), and a folder whose weights file was renamed was
    told it had no weights at all. The checkpoint is now loaded through transformers' renaming, still strictly, and
    the renamed file is named with both ways to read it."""
    renamed = tmp_path / "renamed"
    shutil.copytree(folder, renamed)
    (renamed / "model.safetensors").rename(renamed / "weights.safetensors")
    assert cli_error(["overlay", str(PHOTO), "--model", str(renamed), "--out", str(tmp_path / "o")], capsys) == (
        f"{renamed}: its weights file weights.safetensors is not one transformers reads (model.safetensors or "
        f"pytorch_model.bin); rename it model.safetensors, or pass --checkpoint {renamed / 'weights.safetensors'}")
    assert "vit.encoder.layer.0.attention.attention.key.weight" in read_checkpoint(renamed / "weights.safetensors")
    model = load_model(str(renamed), checkpoint=renamed / "weights.safetensors")
    saved = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    assert model.state_dict().keys() == saved.state_dict().keys()
    assert all(torch.equal(value, saved.state_dict()[key]) for key, value in model.state_dict().items())
    capsys.readouterr()
    assert main(["overlay", str(PHOTO), "--model", str(renamed), "--checkpoint", str(renamed / "weights.safetensors"),
                 "--out", str(tmp_path / "out")]) == 0
    assert "LOAD REPORT" not in capsys.readouterr().err
    partial = dict(read_checkpoint(renamed / "weights.safetensors"))
    partial.pop("classifier.bias")
    partial["classifier.weight"] = torch.zeros(5, 32)
    partial["extra.weight"] = torch.zeros(1)
    torch.save(partial, tmp_path / "partial.pth")
    with pytest.raises(ModelLoadError) as raised:  # strict, in one line, without transformers' load report
        load_model(str(renamed), checkpoint=tmp_path / "partial.pth")
    assert str(raised.value) == (
        f"{tmp_path / 'partial.pth'}: checkpoint does not match ViTForImageClassification — shape mismatch: "
        "classifier.weight (5, 32) vs model (3, 32) | missing keys: classifier.bias | unexpected keys: extra.weight")
    assert "LOAD REPORT" not in capsys.readouterr().err
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copy(folder / "config.json", sharded)
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        shutil.copy(folder / "model.safetensors", sharded / shard)
    with pytest.raises(ModelLoadError) as raised:
        load_model(str(sharded))
    assert str(raised.value) == (
        f"{sharded}: its weights are shards (model-00001-of-00002.safetensors, model-00002-of-00002.safetensors) "
        "without their index model.safetensors.index.json; copy it from where the model was saved")


def test_the_saved_image_processor_sets_the_preprocessing(folder, tmp_path):
    with_processor = tmp_path / "with-processor"
    shutil.copytree(folder, with_processor)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}, resample=3, image_mean=[0.1, 0.2, 0.3],
                                   image_std=[0.4, 0.5, 0.6]).save_pretrained(with_processor)
    preprocessing = vitroll.Preprocessing.from_model(load_model(str(with_processor)))
    assert (preprocessing.input_size, preprocessing.interpolation, preprocessing.mean, preprocessing.std) == (
        (32, 32), "bicubic", (0.1, 0.2, 0.3), (0.4, 0.5, 0.6))


def test_overlay_and_annotate_through_the_cli_equal_the_python_api(folder, tmp_path, capsys):
    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(PHOTO, source / "cat.jpg")
    assert main(["overlay", str(source / "cat.jpg"), "--model", str(folder), "--out", str(tmp_path / "ov"),
                 "--device", "cpu"]) == 0, capsys.readouterr().err
    written = next((tmp_path / "ov").rglob("cat*.png"))
    assert np.asarray(Image.open(written)).shape == (*Image.open(PHOTO).size[::-1], 3)
    out = capsys.readouterr()
    assert "random weights" not in out.err
    assert main(["annotate", str(source), "--model", str(folder), "--out", str(tmp_path / "an"), "--device",
                 "cpu"]) == 0
    saved = np.load(next((tmp_path / "an").rglob("cat.jpg.npy"))).astype(np.float32)
    expected = vitroll.rollout(load_model(str(folder)), [str(source / "cat.jpg")])[0].numpy()
    np.testing.assert_allclose(saved, expected, rtol=2e-3, atol=1e-3)
    written_text = " ".join(p.read_text() for p in (tmp_path / "an").rglob("*")
                            if p.suffix in {".csv", ".json", ".jsonl"})
    assert any(name in written_text for name in LABELS.values())


def test_a_grey_model_takes_the_picture_in_grey_as_its_image_processor_does(tmp_path, capsys):
    """A model saved with num_channels=1 was given the picture in RGB and refused it in transformers' words (Make
    sure that the channel dimension of the pixel values match …, Expected 1 but got 3), naming no model."""
    torch.manual_seed(0)
    grey = tmp_path / "grey-vit"
    transformers.ViTForImageClassification(tiny_config(num_channels=1)).save_pretrained(grey)
    processor = transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}, image_mean=[0.5], image_std=[0.5])
    processor.save_pretrained(grey)
    assert main(["overlay", str(PHOTO), "--model", str(grey), "--out", str(tmp_path / "ov")]) == 0
    assert "error" not in capsys.readouterr().err
    assert Image.open(tmp_path / "ov" / "cat_rollout.png").size == Image.open(PHOTO).size
    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(PHOTO, source / "cat.jpg")
    assert main(["annotate", str(source), "--model", str(grey), "--out", str(tmp_path / "an")]) == 0
    saved = np.load(next((tmp_path / "an").rglob("cat.jpg.npy"))).astype(np.float32)
    pixels = processor(images=Image.open(PHOTO).convert("L"), return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 1, 32, 32)
    expected = vitroll.rollout(load_model(str(grey)), pixels)[0].numpy()
    np.testing.assert_allclose(saved, expected, rtol=2e-3, atol=1e-3)


def test_a_classifier_on_an_image_text_vision_tower_loads_with_its_head(tmp_path):
    """A saved SiglipForImageClassification is that classifier (not the bare tower its model type usually loads)."""
    vision = transformers.SiglipVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=64, image_size=32, patch_size=8)
    config = transformers.SiglipConfig(vision_config=vision.to_dict(), id2label=LABELS,
                                       label2id={v: k for k, v in LABELS.items()},
                                       text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                        intermediate_size=64))
    torch.manual_seed(0)
    transformers.SiglipForImageClassification(config).save_pretrained(tmp_path / "siglip-cls")
    model = load_model(str(tmp_path / "siglip-cls"))
    assert type(model).__name__ == "SiglipForImageClassification" and class_names(model) == list(LABELS.values())
    assert vitroll.chefer(model, [str(PHOTO)]).shape == (1, 4, 4)


def shipped_model_as_transformers(folder: Path) -> Path:
    """vitroll-shapes (a trained timm ViT) rewritten as a transformers ``ViTForImageClassification`` folder, with an
    image processor that repeats timm's preprocessing."""
    from vitroll.testbed.model import ARCHITECTURE, CLASSES, load_testbed_model

    timm_state = load_testbed_model().state_dict()
    depth, width = ARCHITECTURE["depth"], ARCHITECTURE["embed_dim"]
    config = transformers.ViTConfig(
        image_size=ARCHITECTURE["img_size"], patch_size=ARCHITECTURE["patch_size"], hidden_size=width,
        num_hidden_layers=depth, num_attention_heads=ARCHITECTURE["num_heads"],
        intermediate_size=int(width * ARCHITECTURE["mlp_ratio"]), layer_norm_eps=1e-6,
        id2label=dict(enumerate(CLASSES)), label2id={name: index for index, name in enumerate(CLASSES)})
    renamed = {"vit.embeddings.cls_token": "cls_token", "vit.embeddings.position_embeddings": "pos_embed",
               "vit.embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
               "vit.embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
               "vit.layernorm.weight": "norm.weight", "vit.layernorm.bias": "norm.bias",
               "classifier.weight": "head.weight", "classifier.bias": "head.bias"}
    state = {ours: timm_state[theirs] for ours, theirs in renamed.items()}
    for layer in range(depth):
        timm_block, block = f"blocks.{layer}.", f"vit.layers.{layer}."
        for kind in ("weight", "bias"):
            for projection, part in zip(("q_proj", "k_proj", "v_proj"),
                                        timm_state[f"{timm_block}attn.qkv.{kind}"].chunk(3)):
                state[f"{block}attention.{projection}.{kind}"] = part
            for ours, theirs in (("attention.o_proj", "attn.proj"), ("layernorm_before", "norm1"),
                                 ("layernorm_after", "norm2"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
                state[f"{block}{ours}.{kind}"] = timm_state[f"{timm_block}{theirs}.{kind}"]
    model = transformers.ViTForImageClassification(config)
    model.load_state_dict(state, strict=True)
    model.save_pretrained(folder)
    size = ARCHITECTURE["img_size"]
    transformers.ViTImageProcessor(size={"height": size, "width": size}).save_pretrained(folder)
    return folder


def test_the_shipped_model_rewritten_for_transformers_explains_as_its_timm_original(tmp_path, capsys):
    """A trained model, not random weights: the same network through transformers' modules and attention interface
    gives timm's logits, rollout and chefer maps, and the same overlay pixels from the CLI."""
    from vitroll.testbed.model import load_testbed_model

    folder = shipped_model_as_transformers(tmp_path / "shapes-hf")
    ours, theirs = load_model(str(folder)), load_testbed_model()
    image = str(ROOT / "sample_images" / "shapes_cross.png")
    batch = torch.rand(3, 3, 64, 64) * 2 - 1
    torch.testing.assert_close(ours(pixel_values=batch).logits, theirs(batch), atol=1e-5, rtol=0)
    torch.testing.assert_close(vitroll.rollout(ours, image), vitroll.rollout(theirs, image), atol=1e-6, rtol=0)
    torch.testing.assert_close(vitroll.chefer(ours, batch), vitroll.chefer(theirs, batch), atol=1e-5, rtol=0)
    pixels = vitroll.Preprocessing.from_model(ours)(vitroll.load_image(image))[0][None]
    assert vitroll.class_names(ours)[int(ours(pixel_values=pixels).logits.argmax())] == "cross"
    for name, args in (("hf", ["--model", str(folder)]), ("timm", [])):
        assert main(["overlay", image, *args, "--out", str(tmp_path / name), "--device", "cpu"]) == 0
    capsys.readouterr()
    pictures = [np.asarray(Image.open(next((tmp_path / name).glob("*rollout.png")))) for name in ("hf", "timm")]
    assert np.array_equal(*pictures)


@pytest.fixture
def load_reports() -> list[str]:
    """The load reports transformers logs while the test runs: its log handler writes to the stream it was made with,
    which neither capsys nor capfd sees."""
    reports: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: reports.append(record.getMessage()) if "LOAD REPORT" in record.getMessage() else None
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    yield reports
    logger.removeHandler(handler)


def cli_error(args: list[str], capsys) -> str:
    assert main(args) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vitroll: error: "), lines
    return lines[0].removeprefix("vitroll: error: ")


def test_each_loading_mistake_is_one_line(folder, tmp_path, capsys):
    image = str(PHOTO)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_error(["overlay", image, "--model", str(empty), "--out", str(tmp_path / "o")], capsys) == (
        f"{empty}: no config.json in {empty}; give a folder written by save_pretrained")
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(folder / "config.json", config_only)
    assert cli_error(["overlay", image, "--model", str(config_only), "--out", str(tmp_path / "o")], capsys) == (
        f"{config_only}: {config_only} has a config.json but no weights (model.safetensors or pytorch_model.bin); "
        "pass --checkpoint FILE for a state dict on top of the config")
    for config, why in ((transformers.SwinConfig(), "Swin attends within shifted windows: a hierarchical model"),
                        (transformers.T5Config(), "T5 is an encoder–decoder model (its decoder cross-attends"),
                        (transformers.XLNetConfig(), "no vitroll family reads its attention")):
        unsupported = tmp_path / config.model_type
        config.save_pretrained(unsupported)
        message = cli_error(["overlay", image, "--model", str(unsupported), "--out", str(tmp_path / "o")], capsys)
        assert message.startswith(f"{unsupported}: transformers model type {config.model_type!r} is not supported: "
                                  f"{why}")
        assert message.endswith("; the supported model types are aimv2, aimv2_vision_model, albert, beit, bert, "
                                "clip, clip_vision_model, data2vec-vision, deberta-v2, deit, dinov2, "
                                "dinov2_with_registers, dinov3_vit, distilbert, electra, gemma, gemma2, gemma3_text, "
                                "gpt2, gpt_neox, ijepa, llama, metaclip_2, "
                                "metaclip_2_vision_model, mistral, mlcd_vision_model, modernbert, opt, phi, pixio, "
                                "qwen2, qwen3, roberta, siglip, siglip_vision_model, vision-encoder-decoder, vit, "
                                "vit_mae, vit_msn, xlm-roberta")
    # a type transformers 5 no longer ships: its config was told to upgrade transformers
    removed = tmp_path / "efficientformer"
    removed.mkdir()
    (removed / "config.json").write_text(json.dumps({"model_type": "efficientformer",
                                                     "architectures": ["EfficientFormerForImageClassification"]}))
    assert cli_error(["overlay", image, "--model", str(removed), "--out", str(tmp_path / "o")], capsys).startswith(
        f"{removed}: transformers model type 'efficientformer' is not supported: EfficientFormer is no longer in "
        "transformers 5, and it attends only in its last stage, after convolutional stages that pool the pixels: a "
        "hierarchical model has no single token sequence that rollout could follow from layer to layer; use Grad-CAM "
        "(pip install grad-cam); the supported model types are aimv2, ")


def test_a_text_classifier_of_a_supported_type_but_an_unread_class_is_refused_before_its_weights(tmp_path, capsys):
    config = transformers.GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2, n_positions=8, pad_token_id=0,
                                     architectures=["GPT2ForTokenClassification"])
    folder = tmp_path / "gpt2-token-classifier"
    config.save_pretrained(folder)  # no weights: the refusal comes from the config, before any would be read
    assert cli_error(["text", "a cat", "--model", str(folder), "--out", str(tmp_path / "o")], capsys) == (
        f"{folder}: GPT2ForTokenClassification is not supported: of 'gpt2' models vitroll explains GPT2Model, "
        "GPT2LMHeadModel, GPT2ForSequenceClassification (to explain GPT2Model alone, save model.base_model with "
        "save_pretrained)")


@pytest.mark.parametrize("architecture", ["ElectraForPreTraining", "ElectraForTokenClassification"])
def test_a_text_model_whose_head_vitroll_does_not_read_is_refused_rather_than_loaded_as_its_bare_encoder(
        architecture, tmp_path, capsys):
    config = transformers.ElectraConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=32, architectures=[architecture])
    folder = tmp_path / "electra"
    config.save_pretrained(folder)
    assert cli_error(["text", "a cat", "--model", str(folder), "--out", str(tmp_path / "o")], capsys) == (
        f"{folder}: {architecture} is not supported: of 'electra' models vitroll explains ElectraModel, "
        "ElectraForSequenceClassification, ElectraForMaskedLM (to explain ElectraModel alone, save model.base_model "
        "with save_pretrained)")


def test_a_folder_with_its_own_code_is_refused_without_running_or_asking(folder, tmp_path, capsys):
    remote = tmp_path / "remote"
    shutil.copytree(folder, remote)
    config = json.loads((remote / "config.json").read_text())
    config.update(model_type="my-vit", auto_map={"AutoConfig": "configuration_my.MyConfig",
                                                 "AutoModelForImageClassification": "modeling_my.MyViT"})
    (remote / "config.json").write_text(json.dumps(config))
    ran = tmp_path / "ran"
    for module in ("configuration_my.py", "modeling_my.py"):
        (remote / module).write_text(f"open({str(ran)!r}, 'w').close()\n")
    assert cli_error(["overlay", str(PHOTO), "--model", str(remote), "--out", str(tmp_path / "o")], capsys) == (
        f"{remote}: {remote / 'config.json'} builds the model from the folder's own Python code (auto_map: AutoConfig, "
        "AutoModelForImageClassification), which vitroll does not run; vitroll explains the model types transformers "
        "ships (`vitroll models` lists them)")
    assert not ran.exists()


def test_pickled_folder_weights_are_refused_with_the_ways_forward(folder, tmp_path, capsys):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(folder / "config.json", pickled)
    saved = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    torch.save(saved, pickled / "pytorch_model.bin")
    capsys.readouterr()  # transformers' loading bar
    weights = pickled / "pytorch_model.bin"
    assert cli_error(["overlay", str(PHOTO), "--model", str(pickled), "--out", str(tmp_path / "o")], capsys) == (
        f"{pickled}: {weights} holds Python objects besides tensors, and unpickling them can run arbitrary code, so "
        "vitroll refused; if you trust its source, save the model again with save_pretrained (model.safetensors), or "
        f"pass --checkpoint {weights} --trust-checkpoint")
    with pytest.raises(ModelLoadError) as raised:
        load_model(str(pickled))
    assert str(raised.value).endswith(f"or pass checkpoint={str(weights)!r}, trust_checkpoint=True")
    trusted = load_model(str(pickled), checkpoint=weights, trust_checkpoint=True)
    assert all(torch.equal(value, saved.state_dict()[name]) for name, value in trusted.state_dict().items())


def test_pickled_hub_weights_name_a_file_to_pass_not_a_literal_its_pytorch_model_bin(folder, tmp_path, monkeypatch,
                                                                                      capsys):
    """A hub model's pickled weights told Python users to pass ``checkpoint='its pytorch_model.bin'`` (a file name
    that exists nowhere) and the command line ``--checkpoint its pytorch_model.bin``: both now say FILE and where it
    is, each in its own words."""
    import huggingface_hub

    from vitroll.models import hub
    from vitroll.wording import worded_for_the_command_line

    snapshot = tmp_path / "hub" / "models--vitroll-test--pickled-vit" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    shutil.copy(folder / "config.json", snapshot)
    torch.save(transformers.ViTForImageClassification.from_pretrained(folder), snapshot / "pytorch_model.bin")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    start = ("transformers:vitroll-test/pickled-vit: its pytorch_model.bin holds Python objects besides tensors, and "
             "unpickling them can run arbitrary code, so vitroll refused; if you trust its source, save the model "
             "again with save_pretrained (model.safetensors), or pass ")
    with pytest.raises(ModelLoadError) as raised:
        load_model("transformers:vitroll-test/pickled-vit")
    assert str(raised.value) == start + ("checkpoint=FILE (FILE: its pytorch_model.bin in the Hugging Face cache) "
                                         "with trust_checkpoint=True")
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model("transformers:vitroll-test/pickled-vit")
    assert str(raised.value) == start + ("--checkpoint FILE (FILE: its pytorch_model.bin in the Hugging Face cache) "
                                         "with --trust-checkpoint")


def test_a_cached_hub_config_of_a_refused_type_is_refused_for_its_type_not_as_missing_from_the_cache(tmp_path,
                                                                                                    monkeypatch):
    """A hub id whose cached config.json transformers cannot read (EfficientFormer, gone from transformers 5) was told
    'the transformers configuration is not in the local cache and the hub cannot be reached', though it is there."""
    import huggingface_hub

    from vitroll.models import hub

    snapshot = tmp_path / "hub" / "models--vitroll-test--efficientformer" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "efficientformer",
                                                      "architectures": ["EfficientFormerForImageClassification"]}))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    with pytest.raises(ModelLoadError) as raised:
        load_model("transformers:vitroll-test/efficientformer")
    assert str(raised.value).startswith(
        "transformers:vitroll-test/efficientformer: transformers model type 'efficientformer' is not supported: "
        "EfficientFormer is no longer in transformers 5, and it attends only in its last stage")
    (snapshot / "config.json").write_text(json.dumps({"model_type": ["vit"]}))
    with pytest.raises(ModelLoadError) as raised:
        load_model("transformers:vitroll-test/efficientformer")
    assert str(raised.value) == (f"transformers:vitroll-test/efficientformer: {snapshot / 'config.json'} has "
                                 'model_type ["vit"], which is not a name ("vit"); save the model again with '
                                 'save_pretrained')


def test_an_uncached_hub_id_offline_fails_in_one_line_within_seconds(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vitroll", "overlay", str(PHOTO), "--model",
                           "vitroll-test/no-such-vit", "--out", str(tmp_path / "o")],
                          env=env, capture_output=True, text=True, timeout=240)
    elapsed = time.perf_counter() - started
    # a network retry loop takes many minutes; importing vitroll on 2 cores shared by a loaded run took over 60 s
    assert done.returncode != 0 and elapsed < 240
    assert done.stderr.strip().splitlines() == [
        "vitroll: error: vitroll-test/no-such-vit: the transformers configuration is not in the local cache and the "
        "hub cannot be reached; run once with network access or pass a save_pretrained folder"]


def test_transformers_not_installed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ModelLoadError) as raised:
        load_model("transformers:google/vit-base-patch16-224")
    assert str(raised.value) == ('transformers:google/vit-base-patch16-224: Hugging Face transformers is not '
                                 'installed; pip install "vitroll[hf]"')


def test_a_saved_backbone_loads_as_the_backbone_and_explains_its_class_token(tmp_path, capsys):
    torch.manual_seed(0)
    saved = transformers.ViTModel(tiny_config()).eval()
    folder = tmp_path / "vit-backbone"
    saved.save_pretrained(folder)
    model = load_model(str(folder))
    assert type(model) is transformers.ViTModel  # not a classifier with a random head
    assert all(torch.equal(value, saved.state_dict()[name]) for name, value in model.state_dict().items())
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(vitroll.rollout(model, images), vitroll.rollout(saved, images))
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{PHOTO} -> {tmp_path / 'out' / 'cat_rollout.png'}"]


def test_a_saved_beit_backbone_loads_as_itself_with_all_its_weights(tmp_path, capsys, load_reports):
    """It was built as a BeitModel, whose pooler its weights lack: transformers printed a load report of missing
    weights (newly initialised) on the way."""
    torch.manual_seed(0)
    saved = transformers.BeitBackbone(transformers.BeitConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        use_relative_position_bias=True, out_indices=[1])).eval()
    folder = tmp_path / "beit-backbone"
    saved.save_pretrained(folder)
    model = load_model(str(folder))
    assert type(model) is transformers.BeitBackbone
    assert model.state_dict().keys() == saved.state_dict().keys()
    assert all(torch.equal(value, saved.state_dict()[name]) for name, value in model.state_dict().items())
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{PHOTO} -> {tmp_path / 'out' / 'cat_rollout.png'}"]
    assert "MISSING" not in captured.err and "LOAD REPORT" not in captured.err and load_reports == []


def test_a_saved_vision_tower_with_its_projection_loads_as_itself_quietly(tmp_path, capsys, load_reports):
    """AutoModel built it as a CLIPVisionModel: transformers printed a load report of its projection's weight
    (unexpected) on the way."""
    torch.manual_seed(0)
    saved = transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        projection_dim=16)).eval()
    folder = tmp_path / "clip-tower"
    saved.save_pretrained(folder)
    model = load_model(str(folder))
    assert type(model) is transformers.CLIPVisionModelWithProjection
    assert all(torch.equal(value, saved.state_dict()[name]) for name, value in model.state_dict().items())
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(vitroll.rollout(model, images), vitroll.rollout(saved, images))
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{PHOTO} -> {tmp_path / 'out' / 'cat_rollout.png'}"]
    assert "LOAD REPORT" not in captured.err and load_reports == []


@pytest.mark.parametrize("segmenter", ["BeitForSemanticSegmentation", "Data2VecVisionForSemanticSegmentation"])
def test_a_saved_segmenter_loads_as_its_encoder_quietly(segmenter, tmp_path, capsys, load_reports):
    """AutoModel built it as the bare encoder: transformers printed a load report of some fifty head weights
    (unexpected) and the pooler it lacks (missing, random) on the way."""
    model_class = getattr(transformers, segmenter)
    config_class = getattr(transformers, segmenter.replace("ForSemanticSegmentation", "Config"))
    torch.manual_seed(0)
    saved = model_class(config_class(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=4,
                                     num_attention_heads=2, intermediate_size=64, num_labels=3,
                                     out_indices=[0, 1, 2, 3])).eval()
    folder = tmp_path / "segmenter"
    saved.save_pretrained(folder)
    capsys.readouterr()
    model = load_model(str(folder))
    assert type(model) is type(saved.base_model)
    assert model.state_dict().keys() == saved.base_model.state_dict().keys()
    assert all(torch.equal(value, saved.base_model.state_dict()[name]) for name, value in model.state_dict().items())
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(vitroll.rollout(model, images), vitroll.rollout(saved.base_model, images))
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{PHOTO} -> {tmp_path / 'out' / 'cat_rollout.png'}"]
    assert "LOAD REPORT" not in captured.err and load_reports == []


@pytest.mark.parametrize(("config_text", "reason"), [
    ('{"model_type": "vit", ', "is not valid JSON (Expecting property name enclosed in double quotes at line 1, "
                               "column 23); save the model again with save_pretrained"),
    ('[1, 2]', "has no model_type, so it is not a transformers config.json; save the model again with save_pretrained"),
    ('{"model_type": ["vit"]}', 'has model_type ["vit"], which is not a name ("vit"); save the model again with '
                                'save_pretrained'),
    ('{"model_type": 3}', 'has model_type 3, which is not a name ("vit"); save the model again with save_pretrained'),
    ('{"model_type": "vit", "hidden_size": "big"}',
     "is not a configuration transformers can read (Validation error for field 'hidden_size': TypeError: Field "
     "'hidden_size' expected int, got str (value: 'big'))"),
], ids=["not-json", "no-model-type", "model-type-a-list", "model-type-a-number", "wrong-type"])
def test_a_broken_config_json_is_one_line_naming_the_file(folder, tmp_path, capsys, config_text, reason):
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "config.json").write_text(config_text)
    assert cli_error(["overlay", str(PHOTO), "--model", str(broken), "--out", str(tmp_path / "o")], capsys) == (
        f"{broken}: {broken / 'config.json'} {reason}")


def test_vitroll_parses_a_folders_config_json_once_per_load(folder, tmp_path, capsys):
    """A command read and parsed the folder's config.json twice itself (once to tell a text model or a captioner
    from an image model, once to check it before the load), besides transformers' own read: vitroll now parses it
    once, and again only once the file has changed."""
    import traceback

    mine = tmp_path / "mine"
    shutil.copytree(folder, mine)
    openers: list[str] = []

    def count(event: str, args: tuple) -> None:
        if event == "open" and str(args[0]) == str((mine / "config.json").resolve()) and recording:
            caller = next(frame for frame in reversed(traceback.extract_stack()[:-1])
                          if Path(frame.filename).name not in ("pathlib.py", "__init__.py", "functools.py"))
            openers.append(f"{Path(caller.filename).parent.name}/{Path(caller.filename).name}:{caller.name}")

    recording = True
    sys.addaudithook(count)  # an audit hook cannot be removed: `recording` switches it off after
    try:
        assert main(["overlay", str(PHOTO), "--model", str(mine), "--out", str(tmp_path / "out")]) == 0
        vitroll_reads = [opener for opener in openers if opener.startswith("models/")]
        assert vitroll_reads == ["models/transformers.py:_parsed_config"]
        config = json.loads((mine / "config.json").read_text())
        (mine / "config.json").write_text(json.dumps({**config, "model_type": "bert"}, indent=1))
        openers.clear()
        assert cli_error(["overlay", str(PHOTO), "--model", str(mine), "--out", str(tmp_path / "out")], capsys) == (
            f"{mine} is a text model (ViTForImageClassification); explain it with `vitroll text`")
        assert openers.count("models/transformers.py:_parsed_config") == 1
    finally:
        recording = False


def test_a_bare_hub_id_without_an_organisation_is_told_how_to_name_it():
    with pytest.raises(ModelLoadError) as raised:
        load_model("bert-base-uncased")
    assert str(raised.value) == (
        "unknown model name 'bert-base-uncased'; `vitroll models PATTERN` lists the timm names; a Hugging Face model "
        "is a save_pretrained folder, a hub id ORG/NAME in the local cache, or transformers:bert-base-uncased for a "
        "hub id without an organisation")


def test_a_saved_deit_with_its_distillation_head_loads_with_both_heads(tmp_path, capsys):
    """DeiTForImageClassificationWithTeacher was loaded as the bare DeiTModel: both heads dropped (transformers
    printed a load report of unexpected keys) and no class scores to explain."""
    config = transformers.DeiTConfig(**{key: value for key, value in tiny_config().to_dict().items()
                                        if key in ("image_size", "patch_size", "hidden_size", "num_hidden_layers",
                                                   "num_attention_heads", "intermediate_size", "id2label",
                                                   "label2id")})
    torch.manual_seed(0)
    saved = transformers.DeiTForImageClassificationWithTeacher(config).eval()
    saved.save_pretrained(tmp_path / "deit-distilled")
    model = load_model(str(tmp_path / "deit-distilled"))
    assert type(model) is transformers.DeiTForImageClassificationWithTeacher
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(pixel_values=images).logits, saved(pixel_values=images).logits)
    assert class_names(model) == list(LABELS.values())
    assert main(["overlay", str(PHOTO), "--model", str(tmp_path / "deit-distilled"), "--method", "chefer",
                 "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "LOAD REPORT" not in captured.err
    assert captured.out.splitlines()[0] == f"{PHOTO} -> {tmp_path / 'out' / 'cat_chefer.png'}"
    assert captured.out.splitlines()[1].startswith("  1. ")


def test_a_timm_model_saved_by_transformers_is_refused_with_how_to_load_it_through_timm(tmp_path, capsys):
    """A TimmWrapper folder (AutoModelForImageClassification on a timm hub repository, then save_pretrained) was
    refused with "no vitroll family reads its attention", though its model is a timm ViT; its weights, with their
    ``timm_model.`` prefix, now load with --checkpoint on the architecture its config.json names."""
    import timm

    torch.manual_seed(0)
    wrapped = transformers.TimmWrapperForImageClassification(transformers.TimmWrapperConfig(
        architecture="vit_tiny_patch16_224", num_labels=3, model_args=dict(depth=2))).eval()
    wrapped.save_pretrained(tmp_path / "wrapped")
    capsys.readouterr()
    assert main(["overlay", str(PHOTO), "--model", str(tmp_path / "wrapped"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(
        f"vitroll: error: {tmp_path / 'wrapped'}: transformers model type 'timm_wrapper' is not supported: it is "
        "a timm model that transformers wraps, and vitroll explains it through timm: pass --model hf-hub:ORG/NAME for "
        "its hub repository, or for a saved folder --model ARCH --checkpoint FOLDER/model.safetensors (ARCH: the "
        "architecture in its config.json)")
    with pytest.raises(ModelLoadError) as from_python:  # told to 'pass --model hf-hub:ORG/NAME', a flag, in Python
        load_model(str(tmp_path / "wrapped"))
    assert str(from_python.value).startswith(
        f"{tmp_path / 'wrapped'}: transformers model type 'timm_wrapper' is not supported: it is a timm model that "
        "transformers wraps, and vitroll explains it through timm: pass load_model('hf-hub:ORG/NAME') for its hub "
        "repository, or for a saved folder load_model(ARCH, checkpoint='FOLDER/model.safetensors')")
    assert "--" not in str(from_python.value)
    state = read_checkpoint(tmp_path / "wrapped" / "model.safetensors")
    model = timm.create_model("vit_tiny_patch16_224", num_classes=3, depth=2).eval()
    model.load_state_dict(state)
    pixels = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(pixels), wrapped(pixel_values=pixels).logits)


def test_a_saved_mae_for_pretraining_explains_its_encoder_on_every_patch_quietly(tmp_path, capsys, load_reports):
    """MAE checkpoints are saved for pre-training, with mask_ratio 0.75: the command line refused them ("set
    model.config.mask_ratio = 0.0", which it cannot), and built as the encoder alone transformers printed a load report
    of every decoder weight."""
    from reference import reference_rollout

    torch.manual_seed(0)
    saved = transformers.ViTMAEForPreTraining(transformers.ViTMAEConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        decoder_hidden_size=32, decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
        decoder_intermediate_size=64)).eval()
    assert saved.config.mask_ratio == 0.75
    folder = tmp_path / "vit-mae"
    saved.save_pretrained(folder)
    model = load_model(str(folder))
    assert type(model) is transformers.ViTMAEModel and model.config.mask_ratio == 0.0
    assert model.state_dict().keys() == saved.vit.state_dict().keys()
    assert all(torch.equal(value, saved.vit.state_dict()[name]) for name, value in model.state_dict().items())

    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    maps = vitroll.rollout(model, pixels)
    eager = transformers.ViTMAEModel.from_pretrained(folder, attn_implementation="eager", mask_ratio=0.0).double()
    with torch.no_grad():  # the patches in grid order: the noise that sorts them is their index
        attentions = eager(pixel_values=pixels.double(), noise=torch.arange(16.0).double().expand(2, -1),
                           output_attentions=True).attentions
    for index in range(len(pixels)):
        expected = reference_rollout([layer[index].numpy() for layer in attentions], num_prefix=1, grid=(4, 4),
                                     class_token=True)
        assert np.abs(maps[index].numpy() - expected).max() < 1e-5

    capsys.readouterr()
    load_reports.clear()  # the reference's own (its encoder alone)
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{PHOTO} -> {tmp_path / 'out' / 'cat_rollout.png'}"]
    assert "LOAD REPORT" not in captured.err and load_reports == []


def test_folder_loading_refusals_name_keywords_from_python(folder, tmp_path):
    """A Python user whose folder's weights could not be read was told to 'pass --checkpoint …' and
    '--trust-checkpoint', flags they do not have: from Python the refusals name checkpoint= and trust_checkpoint=True
    (the command line's own wording is pinned by the tests above)."""
    config_only, renamed, pickled = (tmp_path / name for name in ("config-only", "renamed", "pickled"))
    for made in (config_only, pickled):
        made.mkdir()
        shutil.copy(folder / "config.json", made)
    shutil.copytree(folder, renamed)
    (renamed / "model.safetensors").rename(renamed / "weights.safetensors")
    torch.save(transformers.ViTForImageClassification.from_pretrained(folder).eval(), pickled / "pytorch_model.bin")
    expected = {config_only: "pass checkpoint=FILE for a state dict on top of the config",
                renamed: f"rename it model.safetensors, or pass checkpoint={str(renamed / 'weights.safetensors')!r}",
                pickled: f"or pass checkpoint={str(pickled / 'pytorch_model.bin')!r}, trust_checkpoint=True"}
    for model_folder, advice in expected.items():
        with pytest.raises(ModelLoadError) as raised:
            load_model(str(model_folder))
        assert str(raised.value).endswith(advice) and "--" not in str(raised.value)


def test_a_model_around_a_supported_backbone_is_told_how_to_explain_the_backbone_and_that_way_works(tmp_path, capsys):
    """A saved Depth Anything (a depth head on a DINOv2 backbone) got the command line's generic "no vitroll family
    reads its attention", while Python's rollout said "explain model.backbone": each now says how, in its own words,
    and the command line's way (the backbone saved on its own) explains the backbone."""
    torch.manual_seed(0)
    backbone = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, image_size=28, patch_size=14,
                                         out_features=["stage1", "stage2"], reshape_hidden_states=False)
    model = transformers.DepthAnythingForDepthEstimation(transformers.DepthAnythingConfig(
        backbone_config=backbone, reassemble_hidden_size=32, neck_hidden_sizes=[16, 32], fusion_hidden_size=16,
        head_hidden_size=8, reassemble_factors=[4, 2])).eval()
    processor = transformers.DPTImageProcessor(size={"height": 28, "width": 28})
    model.save_pretrained(tmp_path / "depth")
    processor.save_pretrained(tmp_path / "depth")
    capsys.readouterr()
    assert main(["overlay", str(PHOTO), "--model", str(tmp_path / "depth"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(
        f"vitroll: error: {tmp_path / 'depth'}: transformers model type 'depth_anything' is not supported: vitroll "
        "reads the attention of its backbone (model type 'dinov2'), not what the model makes of the backbone's "
        "features; to explain the backbone, save it with model.backbone.save_pretrained(FOLDER) and the image "
        "processor with processor.save_pretrained(FOLDER) in Python, then pass --model FOLDER; the supported model "
        "types are aimv2, ")
    with pytest.raises(ModelLoadError) as from_python:
        load_model(str(tmp_path / "depth"))
    assert "to explain the backbone, load the model with transformers and explain model.backbone, or save it with " \
           "model.backbone.save_pretrained(FOLDER) and the image processor with processor.save_pretrained(FOLDER), " \
           "then load_model(FOLDER); the supported" in str(from_python.value)
    assert "--" not in str(from_python.value)
    model.backbone.save_pretrained(tmp_path / "backbone")
    processor.save_pretrained(tmp_path / "backbone")
    capsys.readouterr()
    assert main(["overlay", str(PHOTO), "--model", str(tmp_path / "backbone"), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{PHOTO} -> {tmp_path / 'out' / 'cat_rollout.png'}"]
    pixels = torch.randn(1, 3, 28, 28)
    torch.testing.assert_close(vitroll.rollout(load_model(str(tmp_path / "backbone")), pixels),
                               vitroll.rollout(model.backbone, pixels))
