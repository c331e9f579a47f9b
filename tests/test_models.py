"""Checkpoints: every common layout loads; mismatches and foreign pickles are refused in one line."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from safetensors.torch import save_file

from vitroll import ModelLoadError, load_model
from vitroll.models import class_names

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
    with pytest.raises(ModelLoadError, match=r"does not match VisionTransformer — shape mismatch: pos_embed \(1, 50, 192\) vs model \(1, 197, 192\)"):
        load_model(NAME, checkpoint=path)
    partial = {k: v for k, v in other.state_dict().items() if not k.startswith("blocks.11")}
    torch.save(partial, tmp_path / "partial.pth")
    with pytest.raises(ModelLoadError, match="missing keys: blocks.11"):
        load_model(NAME, checkpoint=tmp_path / "partial.pth", img_size=112)


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
