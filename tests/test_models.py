"""Checkpoints: every common layout loads; mismatches and foreign pickles are refused in one line."""

from __future__ import annotations

import json
import pickle

import numpy

import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

from vitroll import ModelLoadError, load_model
from vitroll.models import class_names
from vitroll.wording import worded_for_the_command_line

NAME = "vit_tiny_patch16_224"


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(5)
    return timm.create_model(NAME, num_classes=7).eval()


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("layout", ["safetensors", "plain", "model", "state_dict", "module_prefix"])
def test_checkpoint_layouts_load_and_infer_num_classes(tmp_path, trained, layout):
    state = trained.state_dict()
    if layout == "safetensors":
        path = tmp_path / "w.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, path)
    else:
        payload = {"plain": state, "model": {"model": state, "epoch": 3}, "state_dict": {"state_dict": state},
                   "module_prefix": {f"module.{k}": v for k, v in state.items()}}[layout]
        path = tmp_path / "w.pth"
        torch.save(payload, path)
    model = load_model(NAME, checkpoint=path)
    assert model.num_classes == 7 and same_weights(model, trained) and not model.training


def test_mismatched_checkpoint_names_keys_and_shapes(tmp_path):
    path = tmp_path / "small.safetensors"
    other = timm.create_model("vit_tiny_patch16_224", img_size=112, num_classes=7)
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, path)
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=path)
    assert str(raised.value) == (f"{path}: checkpoint does not match VisionTransformer — shape mismatch: pos_embed "
                                 "(1, 50, 192) vs model (1, 197, 192); its position embedding is for 112×112 inputs: "
                                 "build the model for them with img_size=112")
    assert load_model(NAME, checkpoint=path, img_size=112).patch_embed.img_size == (112, 112)
    partial = {k: v for k, v in other.state_dict().items() if not k.startswith("blocks.11")}
    torch.save(partial, tmp_path / "partial.pth")
    with pytest.raises(ModelLoadError, match="missing keys: blocks.11"):
        load_model(NAME, checkpoint=tmp_path / "partial.pth", img_size=112)


def test_a_checkpoint_of_a_model_built_with_other_arguments_names_model_arg(tmp_path):
    """A model built with reg_tokens=4 and saved was refused for its keys alone; the user was not told that --model
    rebuilds it only with the arguments it was built with, now given with --model-arg."""
    path = tmp_path / "registers.safetensors"
    other = timm.create_model(NAME, img_size=32, reg_tokens=4, num_classes=3)
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, path)
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=path, img_size=32)
    assert str(raised.value) == (
        f"{path}: checkpoint does not match VisionTransformer — shape mismatch: pos_embed (1, 9, 192) vs model "
        "(1, 5, 192) | unexpected keys: reg_token; it was saved from a model with reg_tokens=4 (this one has "
        "reg_tokens=0): build that one with reg_tokens=4")
    no_class_token = tmp_path / "no_class_token.safetensors"
    other = timm.create_model(NAME, img_size=32, class_token=False, global_pool="avg", num_classes=3)
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, no_class_token)
    with pytest.raises(ModelLoadError) as raised:  # what the tensors do not tell for sure is left to the user
        load_model(NAME, checkpoint=no_class_token, img_size=32)
    assert str(raised.value).endswith(
        f"load_model('{NAME}') builds timm's {NAME} as it is, changed only by the keyword arguments given to it: a "
        "model built with other timm.create_model arguments is rebuilt by giving them (reg_tokens=4, depth=6, …)")
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=no_class_token, img_size=32)
    assert str(raised.value).endswith(
        f"--model {NAME} builds timm's {NAME} as it is, changed only by --img-size, --dynamic-img-size, --num-classes "
        "and --model-arg: a model built with other timm.create_model arguments is rebuilt by giving them "
        "(--model-arg reg_tokens=4, --model-arg depth=6, …)")


def test_a_checkpoint_that_holds_none_of_the_models_weights_says_so_not_to_rebuild_the_model(tmp_path, capsys):
    """A safetensors of another network's tensors (not one key of the ViT's) was told to rebuild the ViT with other
    timm.create_model arguments, which no argument can make fit; it now says the file holds none of its weights."""
    from vitroll.cli import main
    from vitroll.errors import ForeignWeightsError

    foreign = tmp_path / "classifier.safetensors"
    save_file(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4, 2)).state_dict(),
              foreign)
    told = (f"{foreign}: checkpoint holds none of VisionTransformer's weights: its keys (0.bias, 0.weight, 2.bias "
            "…) are none of the model's (cls_token, pos_embed, patch_embed.proj.weight …); it is another "
            "architecture's checkpoint, or no model's state dict")
    with pytest.raises(ForeignWeightsError) as raised:
        load_model(NAME, checkpoint=foreign, img_size=32, num_classes=2)
    assert str(raised.value) == told and isinstance(raised.value, ModelLoadError)
    image = tmp_path / "image.png"
    Image.fromarray(numpy.full((32, 32, 3), 90, numpy.uint8)).save(image)
    assert main(["overlay", str(image), "--model", NAME, "--img-size", "32", "--checkpoint", str(foreign), "--out",
                 str(tmp_path / "out"), "--device", "cpu"]) == 2
    assert capsys.readouterr().err == f"vitroll: error: {told}\n"


def test_a_checkpoint_of_another_depth_or_width_names_the_model_args_that_build_it(tmp_path, capsys):
    """A checkpoint saved with depth=2 only listed the missing blocks.2 keys; one saved with another embed_dim was
    told to rebuild with the --img-size the user had already given (its position embedding differed in width, not in
    length). Both now name what differs and the --model-arg options that build it (num_heads left to the user: the
    weights do not tell it)."""
    from vitroll.cli import main

    shallow = tmp_path / "shallow.bin"
    torch.save(timm.create_model(NAME, depth=2, img_size=32, num_classes=3).state_dict(), shallow)
    image = tmp_path / "image.png"
    Image.fromarray(numpy.full((32, 32, 3), 90, numpy.uint8)).save(image)
    command = ["overlay", str(image), "--model", NAME, "--img-size", "32", "--checkpoint", str(shallow), "--out",
               str(tmp_path / "out"), "--device", "cpu"]
    assert main(command) == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {shallow}: checkpoint does not match VisionTransformer — missing keys: "
        f"blocks.2.norm1.weight, "
        "blocks.2.norm1.bias, blocks.2.attn.qkv.weight …; it was saved from a model with depth=2 (this one has "
        "depth=12): build that one with --model-arg depth=2\n")
    assert main([*command, "--model-arg", "depth=2"]) == 0
    narrow = tmp_path / "narrow.bin"
    torch.save(timm.create_model(NAME, embed_dim=96, img_size=32, num_classes=3).state_dict(), narrow)
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=narrow, img_size=32)
    assert "--" not in str(raised.value)
    assert str(raised.value).endswith(
        "it was saved from a model with embed_dim=96 (this one has embed_dim=192): build that one with embed_dim=96 "
        "and the num_heads=H it was trained with (its weights do not tell H)")
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=narrow, img_size=32)
    assert str(raised.value).endswith("build that one with --model-arg embed_dim=96 and the --model-arg num_heads=H it "
                                      "was trained with (its weights do not tell H)")


def test_a_checkpoint_differing_in_several_settings_names_every_one_in_one_line(tmp_path):
    """A checkpoint whose depth and input size both differed from the built model named only the depth: rebuilt
    with --model-arg depth=2 it failed again on its position embedding. Every setting the weights tell (depth,
    embed_dim, reg_tokens, patch_size, img_size, num_classes) that differs is now named, with its option."""
    several = tmp_path / "several.pth"
    torch.save(timm.create_model(NAME, depth=2, img_size=32, patch_size=8, num_classes=3).state_dict(), several)
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=several)
    assert str(raised.value).endswith(
        "it was saved from a model with depth=2, patch_size=8, img_size=32 (this one has depth=12, patch_size=16, "
        "img_size=224): build that one with depth=2, patch_size=8, img_size=32")
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=several)
    assert str(raised.value).endswith("build that one with --model-arg depth=2 --model-arg patch_size=8 --img-size 32")
    assert load_model(NAME, checkpoint=several, depth=2, patch_size=8, img_size=32).patch_embed.patch_size == (8, 8)
    classes = tmp_path / "classes.pth"
    torch.save(timm.create_model(NAME, img_size=32, num_classes=3).state_dict(), classes)
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=classes, num_classes=5, img_size=32)
    assert str(raised.value) == (
        f"{classes}: checkpoint does not match VisionTransformer — shape mismatch: head.weight (3, 192) vs model "
        "(5, 192); head.bias (3,) vs model (5,); it was saved from a model with num_classes=3 (this one has "
        "num_classes=5): build that one with num_classes=3")
    registers = tmp_path / "registers.pth"
    torch.save(timm.create_model("vit_small_patch14_reg4_dinov2", depth=1, img_size=28).state_dict(), registers)
    with pytest.raises(ModelLoadError) as raised:  # the prefix tokens (class, 4 registers) are not the patch grid
        load_model("vit_small_patch14_reg4_dinov2", checkpoint=registers)
    assert str(raised.value).endswith("it was saved from a model with depth=1, img_size=28 (this one has depth=12, "
                                      "img_size=518): build that one with depth=1, img_size=28")


def test_a_model_saved_inside_a_training_wrapper_loads_from_under_its_prefix(tmp_path):
    """A Lightning checkpoint (the model kept as `self.model`, a loss beside it) was refused with every key missing
    and every key unexpected (model.cls_token …) and a hint about timm.create_model arguments. The model's weights are
    now found under their one prefix (its classifier size too), the loss's left out; what differs is told as before."""
    saved = timm.create_model(NAME, img_size=32, num_classes=3)
    wrapped = {f"model.{key}": value for key, value in saved.state_dict().items()}
    torch.save({"state_dict": {**wrapped, "criterion.weight": torch.ones(3)}, "epoch": 3}, tmp_path / "last.ckpt")
    model = load_model(NAME, checkpoint=tmp_path / "last.ckpt", img_size=32)
    assert same_weights(model, saved)
    shallow = timm.create_model(NAME, img_size=32, depth=2, num_classes=3).state_dict()
    torch.save({"state_dict": {f"net.{key}": value for key, value in shallow.items()}}, tmp_path / "shallow.ckpt")
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=tmp_path / "shallow.ckpt", img_size=32)
    assert str(raised.value) == (
        f"{tmp_path / 'shallow.ckpt'}: checkpoint does not match VisionTransformer — missing keys: "
        "blocks.2.norm1.weight, blocks.2.norm1.bias, blocks.2.attn.qkv.weight …; it was saved from a model with "
        "depth=2 (this one has depth=12): build that one with depth=2")
    other = {"stem.norm.weight": torch.ones(192), "stem.conv.weight": torch.ones(192, 3, 3, 3)}
    torch.save(other, tmp_path / "other.pth")  # one name in common (norm.weight) does not make it this model's
    with pytest.raises(ModelLoadError, match=r"its keys \(stem\.norm\.weight, stem\.conv\.weight\) are none of the "):
        load_model(NAME, checkpoint=tmp_path / "other.pth", img_size=32)


def test_model_arg_rebuilds_a_model_saved_with_other_create_model_arguments(tmp_path, capsys):
    """The CLI could not rebuild a timm model built with other create_model arguments (registers, no class token,
    average pooling); --model-arg KEY=VALUE gives them, read as int / float / bool / none / text."""
    from vitroll.cli import main
    from vitroll.commands.arguments import model_argument

    assert [model_argument(text) for text in ("reg_tokens=4", "class-token=False", "drop_rate=0.5", "fc_norm=none",
                                              "global_pool=avg", "name=__import__('os')")] == [
        ("reg_tokens", 4), ("class_token", False), ("drop_rate", 0.5), ("fc_norm", None), ("global_pool", "avg"),
        ("name", "__import__('os')")]
    torch.manual_seed(2)
    built = dict(img_size=32, reg_tokens=4, class_token=False, global_pool="avg", depth=2, num_classes=3)
    saved = timm.create_model(NAME, **built).eval()
    path = tmp_path / "registers.safetensors"
    save_file({k: v.contiguous() for k, v in saved.state_dict().items()}, path)
    image = tmp_path / "image.png"
    Image.fromarray(numpy.full((32, 32, 3), 90, numpy.uint8)).save(image)
    code = main(["overlay", str(image), "--model", NAME, "--img-size", "32", "--checkpoint", str(path), "--out",
                 str(tmp_path / "out"), "--device", "cpu", "--model-arg", "reg_tokens=4", "--model-arg",
                 "class_token=false", "--model-arg", "global_pool=avg", "--model-arg", "depth=2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (tmp_path / "out" / "image_rollout.png").is_file()
    rebuilt = load_model(NAME, checkpoint=path, img_size=32, reg_tokens=4, class_token=False, global_pool="avg",
                         depth=2)
    assert same_weights(rebuilt, saved)


class NotAStateDict:
    def __reduce__(self):
        return (print, ("this would run on load",))


def test_pickle_with_code_is_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"model": NotAStateDict()}, path)
    with pytest.raises(ModelLoadError, match=r"holds Python objects \(builtins.print\) besides tensors, and unpickling "
                                             "them can run arbitrary code, so vitroll refused"):
        load_model(NAME, checkpoint=path)


def test_missing_and_empty_checkpoints(tmp_path):
    with pytest.raises(ModelLoadError, match="no such checkpoint file"):
        load_model(NAME, checkpoint=tmp_path / "none.pth")
    torch.save({"epoch": 3}, tmp_path / "meta.pth")
    with pytest.raises(ModelLoadError, match="holds no tensors"):
        load_model(NAME, checkpoint=tmp_path / "meta.pth")


def test_a_renamed_file_is_read_by_its_content_and_a_trusted_whole_model_gives_its_state_dict(tmp_path, trained):
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, tmp_path / "renamed.pth")
    torch.save(trained.state_dict(), tmp_path / "zip.safetensors")
    torch.save(trained.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    torch.save(trained, tmp_path / "whole.pth")
    for name in ("renamed.pth", "zip.safetensors", "legacy.pt"):
        assert same_weights(load_model(NAME, checkpoint=tmp_path / name), trained)
    assert same_weights(load_model(NAME, checkpoint=tmp_path / "whole.pth", trust_checkpoint=True), trained)


def test_an_untrusted_pickle_is_refused_from_python_naming_trust_checkpoint_not_the_flag(tmp_path, trained):
    torch.save(trained, tmp_path / "whole.pth")
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=tmp_path / "whole.pth")
    assert str(raised.value).endswith("or pass trust_checkpoint=True to unpickle it on every run")
    assert "--" not in str(raised.value)


def damaged(path, data: bytes) -> None:
    path.write_bytes(data[: len(data) // 2])


def npz(path) -> None:
    with path.open("wb") as handle:
        numpy.savez(handle, weight=numpy.zeros(3))


@pytest.mark.parametrize("make, expected", [
    (lambda path, model: path.mkdir(),
     "a folder, not a weights file; a checkpoint is one .safetensors or torch.save file"),
    (lambda path, model: path.write_bytes(b""), "the file is empty (0 bytes), not a checkpoint"),
    (lambda path, model: path.write_text("cat\ndog\n"),
     "neither a safetensors file nor a torch.save file (its first bytes are neither's)"),
    (lambda path, model: (torch.save(model.state_dict(), path), damaged(path, path.read_bytes())),
     "a torch.save file (a zip archive) that cannot be read; it may be truncated or damaged, so copy or save it again"),
    (lambda path, model: (save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path),
                          damaged(path, path.read_bytes())),
     "a safetensors file that cannot be read; it may be truncated or damaged, so copy or save it again "
     "(SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered)"),
    (lambda path, model: path.write_bytes(pickle.dumps(model.state_dict(), protocol=4)),
     "a Python pickle written by pickle.dump, not by torch.save, so torch cannot read it"),
    (lambda path, model: torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path),
     "a TorchScript program (torch.jit.save), not a state dict"),
    (lambda path, model: npz(path),
     "a NumPy .npz archive (JAX/Flax weights), not a PyTorch state dict"),
    (lambda path, model: torch.save(model, path), "a whole pickled model (torch.save(model)), not a state dict"),
], ids=["folder", "empty", "text", "truncated-zip", "truncated-safetensors", "plain-pickle", "torchscript", "npz",
        "whole-model"])
def test_a_file_that_is_no_state_dict_says_what_it_is_in_one_line(tmp_path, trained, make, expected):
    path = tmp_path / "weights.pth"
    make(path, trained)
    with pytest.raises(ModelLoadError) as raised:
        load_model(NAME, checkpoint=path)
    message = str(raised.value)
    assert message.startswith(f"{path}: {expected}") and "\n" not in message and "\x1b" not in message


def test_class_names_from_files_and_imagenet(tmp_path, trained):
    names = ["cat", "dog", "owl", "eel", "ant", "bee", "elk"]  # one per class of the 7-class model
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n\n")
    (tmp_path / "names.json").write_text(json.dumps({str(i): names[i] for i in (6, 1, 0, 2, 3, 5, 4)}))
    assert class_names(trained, tmp_path / "names.txt") == names
    assert class_names(trained, tmp_path / "names.json") == names
    (tmp_path / "two.txt").write_text("cat\ndog\n")
    with pytest.raises(ModelLoadError, match="two.txt: 2 class names for a model with 7 classes"):
        class_names(trained, tmp_path / "two.txt")
    assert class_names(trained) is None
    imagenet = class_names(timm.create_model(NAME))
    assert len(imagenet) == 1000 and imagenet[281].startswith("tabby")


def test_class_names_take_name_to_index_json_and_refuse_gaps_and_extra_names(tmp_path, trained):
    names = ["cat", "dog", "owl", "eel", "ant", "bee", "elk"]
    (tmp_path / "class_to_idx.json").write_text(json.dumps({name: index for index, name in enumerate(names)}))
    assert class_names(trained, tmp_path / "class_to_idx.json") == names
    gap = {str(i): name for i, name in enumerate(names) if i != 3} | {"7": "yak"}
    (tmp_path / "gap.json").write_text(json.dumps(gap))
    with pytest.raises(ModelLoadError, match=r"gap.json: expected a JSON list of names, \{index: name\} or "
                                             r"\{name: index\} with the indices 0, 1, 2, … each once"):
        class_names(trained, tmp_path / "gap.json")
    (tmp_path / "imagenet.txt").write_text("\n".join(names + ["yak"]))
    with pytest.raises(ModelLoadError, match="imagenet.txt: 8 class names for a model with 7 classes"):
        class_names(trained, tmp_path / "imagenet.txt")


def test_class_names_are_counted_against_a_transformers_classifier(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(image_size=32, patch_size=16, hidden_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=64, num_labels=3)
    (tmp_path / "two.txt").write_text("cat\ndog\n")
    with pytest.raises(ModelLoadError, match="two.txt: 2 class names for a model with 3 classes"):
        class_names(transformers.ViTForImageClassification(config), tmp_path / "two.txt")


def test_a_model_name_that_is_blank_a_file_or_missing_is_named_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_file({"w": torch.zeros(1)}, tmp_path / "weights.safetensors")
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "config.json").write_text('{"model_type": "vit"}')
    expected = {
        "weights.safetensors": "weights.safetensors: a file, not a model; load_model takes a model name or a "
                               "save_pretrained folder (weights go with their architecture: load_model(ARCH, "
                               "checkpoint='weights.safetensors'))",
        "saved/config.json": "saved/config.json: a file of a save_pretrained folder; the folder is the model: pass "
                             "load_model('saved')",
        "./my-vit": "./my-vit: no such model folder",  # was taken for a hub id and looked up in the cache
        str(tmp_path / "my-vit"): f"{tmp_path / 'my-vit'}: no such model folder",  # was an unknown timm name
        "my-vit/": "my-vit/: no such model folder",
        " ": "the model name is empty; give a timm name, a save_pretrained folder, a hub id, torchvision:ARCH or "
             "open_clip:ARCH",  # '' was the current folder: "no config.json in ."
        "timm/vit_tiny_patch16_224.augreg_in21k": "timm/vit_tiny_patch16_224.augreg_in21k: a timm repository on the "
                                                  "Hugging Face hub, which transformers cannot load; pass it as "
                                                  "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k",
    }
    for name, message in expected.items():
        with pytest.raises(ModelLoadError) as raised:
            load_model(name)
        assert str(raised.value) == message


@pytest.mark.parametrize(("name", "on_the_command_line"), [
    ("weights.safetensors", "weights.safetensors: a file, not a model; --model takes a model name or a "
                            "save_pretrained folder (weights go with their architecture: --model ARCH --checkpoint "
                            "weights.safetensors)"),
    ("saved/config.json", "saved/config.json: a file of a save_pretrained folder; the folder is the model: pass "
                          "--model saved"),
])
def test_a_file_given_for_a_model_is_named_in_flags_only_on_the_command_line(tmp_path, monkeypatch, name,
                                                                             on_the_command_line):
    """A Python user was told '--model takes a model name … --model ARCH --checkpoint FILE': flags they do not have.
    From Python the refusal names load_model and its checkpoint= keyword; the command line keeps its flags."""
    monkeypatch.chdir(tmp_path)
    save_file({"w": torch.zeros(1)}, tmp_path / "weights.safetensors")
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "config.json").write_text('{"model_type": "vit"}')
    with pytest.raises(ModelLoadError) as from_python:
        load_model(name)
    assert "--" not in str(from_python.value) and "load_model(" in str(from_python.value)
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model(name)
    assert str(raised.value) == on_the_command_line


@pytest.mark.parametrize(("name", "build", "from_python", "on_the_command_line"), [
    ("vitroll-shapes", {"num_classes": 3}, "num_classes=3 does not apply", "--num-classes 3 does not apply"),
    ("vitroll-shapes", {"num_classes": 3, "img_size": (32, 32)}, "num_classes=3, img_size=(32, 32) do not apply",
     "--num-classes 3 --img-size 32 32 do not apply"),
    ("open_clip:ViT-B-32", {"depth": 2}, "depth=2 does not apply", "--model-arg depth=2 does not apply"),
])
def test_build_arguments_a_model_ignores_are_named_as_the_user_gave_them(name, build, from_python,
                                                                         on_the_command_line):
    """load_model('vitroll-shapes', num_classes=3) said '--num-classes and the timm size options do not apply' to a
    Python user: the refusal names the keyword arguments given, and the flags only on the command line."""
    with pytest.raises(ModelLoadError) as raised:
        load_model(name, **build)
    assert str(raised.value).endswith(f"; {from_python}") and "--" not in str(raised.value)
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model(name, **build)
    assert str(raised.value).endswith(f"; {on_the_command_line}")


def test_naflexvit_preprocesses_as_its_pretrained_config_and_refuses_an_img_size_timm_ignores():
    """NaFlexViT preprocesses as timm's eval transform of its pretrained config (384 px, crop_pct 1.0); --img-size,
    which timm drops for it (its position grid comes from the config), left the images at 384 without a word."""
    from vitroll import Preprocessing

    tiny = dict(depth=1, embed_dim=32, num_heads=2)
    model = load_model("naflexvit_base_patch16_gap", **tiny)
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    image = Image.fromarray(numpy.random.default_rng(0).integers(0, 256, (300, 500, 3), numpy.uint8))
    ours, geometry = Preprocessing.from_model(model)(image)
    assert geometry.input_hw == (384, 384) and torch.equal(ours, transform(image))
    with pytest.raises(ModelLoadError) as raised:
        load_model("naflexvit_base_patch16_gap", img_size=224, **tiny)
    assert str(raised.value) == (
        "naflexvit_base_patch16_gap: img_size 224×224 does not change the model, which still preprocesses at "
        "384×384 (it takes any size of whole patches); give the size to preprocess at with Preprocessing's "
        "input_size=(224, 224) instead of img_size")
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        load_model("naflexvit_base_patch16_gap", img_size=224, **tiny)
    assert str(raised.value).endswith("give the size to preprocess at with --input-size 224 224 instead of --img-size")


def test_weights_refusals_name_checkpoint_keywords_from_python(tmp_path, monkeypatch):
    """Refusals of weights that cannot be had or read told a Python user to 'pass --checkpoint FILE' or 'pass it as
    --model FOLDER': they now name checkpoint=FILE and load_model(FOLDER) (the command line keeps its flags, pinned
    in test_torchvision, test_zoo_cli, test_image_text and test_mistakes).."""
    import vitroll.models.hub

    (tmp_path / "notes.txt").write_text("not weights")
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(vitroll.models.hub, "host_reachable", lambda host, port, timeout: False)
    monkeypatch.setattr(vitroll.models.hub, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(vitroll.models.hub, "pretrained_maybe_cached", lambda name: False)
    calls = {"folder": lambda: load_model("vit_tiny_patch16_224", checkpoint=tmp_path),
             "text": lambda: load_model("vit_tiny_patch16_224", checkpoint=tmp_path / "notes.txt"),
             "torchvision": lambda: load_model("torchvision:vit_b_16", pretrained=True),
             "timm": lambda: load_model("vit_tiny_patch16_224", pretrained=True),
             "open_clip": lambda: load_model("open_clip:ViT-B-32", pretrained=True)}
    expected = {"folder": "(a save_pretrained folder is a model: pass it as load_model(FOLDER))",
                "text": "checkpoint takes a state dict saved as .safetensors or with torch.save",
                "torchvision": "pass checkpoint=FILE or run once with network access",
                "timm": "pass checkpoint=FILE (.safetensors/.pth) or run once with network access",
                "open_clip": "pass the weights as checkpoint=FILE (open_clip_model.safetensors)"}
    for kind, call in calls.items():
        with pytest.raises(ModelLoadError) as raised:
            call()
        assert expected[kind] in str(raised.value) and "--" not in str(raised.value), kind
    with worded_for_the_command_line(), pytest.raises(ModelLoadError) as raised:
        calls["folder"]()
    assert str(raised.value).endswith("(a save_pretrained folder is a model: pass it as --model FOLDER)")


def test_a_model_of_random_weights_is_the_same_on_every_build_and_leaves_the_callers_random_state():
    """Each build of a model without weights drew other random weights: a resumed ``vitroll annotate`` mixed the
    maps of two models under one settings hash, and ``vitroll compare --model M --model M`` agreed at 0.09."""
    torch.manual_seed(11)
    expected_next = torch.rand(3)
    torch.manual_seed(11)
    first = load_model(NAME, num_classes=5)
    assert torch.equal(torch.rand(3), expected_next)
    torch.manual_seed(12)
    assert same_weights(first, load_model(NAME, num_classes=5))
    assert same_weights(load_model("torchvision:vit_b_16", img_size=32, num_classes=3),
                        load_model("torchvision:vit_b_16", img_size=32, num_classes=3))


def test_random_weights_are_described_for_the_caller_and_fingerprinted_as_before():
    """The description names load_model's arguments from Python and the flags on the command line; the fingerprint
    (which annotate's settings hash holds) is byte for byte what it always was, so existing output folders resume."""
    from vitroll.models import ModelProvenance

    before = "RANDOM weights (no --pretrained or --checkpoint): the maps mean nothing"
    provenance = ModelProvenance.of("test_vit", pretrained=False, checkpoint=None)
    assert provenance.description == "RANDOM weights (pretrained=False, checkpoint=None): the maps mean nothing"
    assert provenance.fingerprint == before
    with worded_for_the_command_line():
        provenance = ModelProvenance.of("test_vit", pretrained=False, checkpoint=None)
    assert provenance.description == before and provenance.fingerprint == before
