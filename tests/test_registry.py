"""The method registry: options read from each method's signature, checked, reachable from the command line,
and listed by ``vitroll methods``."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch

import vitroll
from vitroll.cli import main
from vitroll.errors import MethodOptionError
from vitroll.methods import METHODS, Method, Saliency, check_shared_options
from vitroll.pipelines.explain import ExplainSettings
from vitroll.testbed.model import load_testbed_model

SHAPE = Path(__file__).resolve().parents[1] / "sample_images" / "shapes_disk.png"


@pytest.fixture(scope="module")
def testbed() -> tuple[torch.nn.Module, torch.Tensor]:
    return load_testbed_model(), torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_options_are_the_signature_after_model_and_images():
    for name, method in METHODS.items():
        parameters = list(inspect.signature(method.compute).parameters.values())[2:]
        assert list(method.options) == [p.name for p in parameters], name
        hints = typing.get_type_hints(method.compute)
        for parameter in parameters:
            option = method.options[parameter.name]
            assert option.default == parameter.default and option.hint == hints[parameter.name], (name, option)


def test_an_unknown_option_names_it_the_method_and_what_it_takes(testbed):
    model, images = testbed
    expected = "method 'attention' takes no option 'discard_ratio' (it takes: head_fusion, layer, max_attention_memory)"
    with pytest.raises(MethodOptionError) as caught:
        METHODS["attention"](model, images, discard_ratio=0.9)
    assert str(caught.value) == expected
    with pytest.raises(MethodOptionError) as caught:  # the public verb goes through the same check
        vitroll.attention(model, images, discard_ratio=0.9)
    assert str(caught.value) == expected
    with pytest.raises(MethodOptionError) as caught:
        ExplainSettings(method="attention", method_options={"discard_ratio": 0.9})
    assert str(caught.value) == expected


def test_a_value_of_the_wrong_type_is_one_clear_error(testbed):
    model, images = testbed
    with pytest.raises(MethodOptionError) as caught:
        vitroll.rollout(model, images, start_layer="2")
    assert str(caught.value) == "option 'start_layer' of method 'rollout' takes int; got '2' (str)"
    with pytest.raises(MethodOptionError) as caught:
        METHODS["flow"](model, images, solver="magic")
    assert str(caught.value) == "option 'solver' of method 'flow' takes 'scipy' | 'networkx'; got 'magic' (str)"
    with pytest.raises(MethodOptionError) as caught:
        METHODS["random"](model, images, seed=True)
    assert str(caught.value) == "option 'seed' of method 'random' takes int; got True (bool)"


def test_values_of_the_right_type_pass_unchanged(testbed):
    model, images = testbed
    torch.testing.assert_close(vitroll.random_map(model, images, seed=np.int64(4)),
                               vitroll.random_map(model, images, seed=4))
    targets = torch.tensor([1, 2])
    assert METHODS["chefer"].check({"target_class": targets})["target_class"] is targets
    assert METHODS["chefer"].check({"target_class": [1, 2], "start_layer": 1}) == {"target_class": [1, 2],
                                                                                    "start_layer": 1}
    assert METHODS["center"].check({"sigma": 1}) == {"sigma": 1}  # an int is a number


def test_text_is_read_as_the_options_type():
    def compute(model, images, *, flag: bool = False, scale: float = 1.0, label: Optional[str] = None,
                classes: Optional[list[int]] = None) -> Saliency:
        raise AssertionError("never run")

    method = Method("typed", compute)
    assert [method.parse("flag", text) for text in ("true", "no", "1")] == [True, False, True]
    assert method.parse("scale", "2") == 2.0 and isinstance(method.parse("scale", "2"), float)
    assert method.parse("label", "none") is None and method.parse("label", "cat") == "cat"
    assert method.parse("classes", "3, 5") == [3, 5]
    assert METHODS["integrated_gradients"].parse("target_class", "7") == 7
    assert METHODS["attention"].parse("head_fusion", "none") is None
    assert METHODS["rollout"].parse("dtype", "float16") is torch.float16
    for name, text, expected in [("flag", "maybe", "takes bool; got 'maybe'"),
                                 ("scale", "nan", "takes float; got 'nan'"),
                                 ("classes", "3,x", "takes list[int] | None; got '3,x'")]:
        with pytest.raises(MethodOptionError) as caught:
            method.parse(name, text)
        assert str(caught.value) == f"option {name!r} of method 'typed' {expected}"


def test_options_shared_by_several_methods_go_to_those_that_take_them():
    chefer, attention = METHODS["chefer"], METHODS["attention"]
    shared = {"start_layer": 1, "layer": -2}
    assert check_shared_options([chefer, attention], shared) == shared
    assert chefer.among(shared) == {"start_layer": 1} and attention.among(shared) == {"layer": -2}
    with pytest.raises(MethodOptionError) as caught:
        check_shared_options([chefer, attention], {"steps": 4})
    assert str(caught.value) == ("none of the methods chefer, attention takes option 'steps' "
                                 "(`vitroll methods` lists what each takes)")
    settings = ExplainSettings(method="rollout", method_options={"discard_ratio": 0.5, "start_layer": 1})
    assert settings.for_method("chefer").method_options == {"start_layer": 1}


def test_public_verbs_say_they_return_the_maps_tensor(testbed):
    model, images = testbed
    computes = {method.compute: name for name, method in METHODS.items()}
    verbs = [getattr(vitroll, name) for name in vitroll.__all__
             if getattr(getattr(vitroll, name), "__wrapped__", None) in computes]
    assert {computes[verb.__wrapped__] for verb in verbs} == set(METHODS)  # every method has its verb exported
    for verb in verbs:
        assert typing.get_type_hints(verb)["return"] is torch.Tensor, verb.__name__
        assert inspect.signature(verb).return_annotation is torch.Tensor, verb.__name__
        assert isinstance(verb(model, images), torch.Tensor), verb.__name__


def test_option_steps_reaches_integrated_gradients(tmp_path, capsys, monkeypatch):
    captum_attr = pytest.importorskip("captum.attr")
    steps_run = []
    attribute = captum_attr.IntegratedGradients.attribute

    def counting(self, *args, **kwargs):
        steps_run.append(kwargs["n_steps"])
        return attribute(self, *args, **kwargs)

    monkeypatch.setattr(captum_attr.IntegratedGradients, "attribute", counting)
    maps = {}
    for steps in ("4", "32"):
        out = tmp_path / steps
        code, _, err = run(capsys, "overlay", str(SHAPE), "--method", "integrated_gradients", "--option",
                           f"steps={steps}", "--out", str(out))
        assert code == 0 and err == "", err
        maps[steps] = np.asarray(vitroll.load_image(out / "shapes_disk_integrated_gradients.png"))
    assert steps_run == [4, 32]
    assert not np.array_equal(maps["4"], maps["32"])  # 4 Riemann steps are a coarser integral


def test_a_flag_the_method_does_not_take_is_one_warning_and_the_run_goes_on(tmp_path, capsys):
    code, out, err = run(capsys, "overlay", str(SHAPE), "--method", "attention", "--discard-ratio", "0.9",
                         "--out", str(tmp_path))
    assert code == 0
    assert err.splitlines() == ["vitroll: warning: --discard-ratio is not an option of method 'attention' "
                                "(it takes: head_fusion, layer, max_attention_memory); ignored"]
    assert (tmp_path / "shapes_disk_attention.png").is_file() and "1. disk" in out


def test_methods_command_lists_every_method_with_its_options_and_defaults(capsys):
    code, out, _ = run(capsys, "methods")
    assert code == 0
    blocks = {}
    for line in out.splitlines():
        if line and not line.startswith(" ") and "(needs " in line:
            name = line.split()[0]
            blocks[name] = []
        elif line.startswith("    "):
            blocks[name].append(line.strip())
    assert set(blocks) == set(METHODS)
    for name, method in METHODS.items():
        parameters = list(inspect.signature(method.compute).parameters.values())[2:]
        assert [line.split(":")[0] for line in blocks[name]] == [p.name for p in parameters], name
        assert all(line.split("  # ")[0].endswith(f" = {p.default!r}")  # a unit may follow after "  # "
                   for line, p in zip(blocks[name], parameters)), name
    assert ("    max_attention_memory: int | None = None  # bytes, as in the Python API; its flag "
            "--max-attention-memory takes MiB") in out.splitlines()  # was without a unit: the flag's is MiB
    assert "integrated_gradients  (needs gradients, captum)" in out
    assert "rollout  (needs a forward pass)" in out and "chefer  (needs gradients)" in out


def test_methods_command_for_one_method_shows_its_documentation(capsys):
    code, out, _ = run(capsys, "methods", "flow")
    assert code == 0
    assert out.splitlines()[:5] == ["flow  (needs a forward pass)", "    head_fusion: 'mean' | 'max' | 'min' = 'mean'",
                                    "    attention_weight: float = 0.5", "    solver: 'scipy' | 'networkx' = 'scipy'",
                                    "    max_tokens: int = 257"]
    assert inspect.getdoc(METHODS["flow"].compute) in out


def test_the_readmes_method_of_your_own_runs_as_written(testbed, tmp_path, capsys):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (block,) = [b.split("\n", 1)[1] for b in readme.split("```")[1::2]
                if b.startswith("python") and '@register_method("brightness")' in b]
    model, images = testbed
    namespace = {}
    try:
        exec(block, namespace)
        maps = METHODS["brightness"](model, images, power=2).maps
        verb = namespace["brightness"]  # its compute says `images`; the verb takes `inputs`, as its signature says
        assert list(inspect.signature(verb).parameters)[:2] == ["model", "inputs"]
        assert torch.equal(verb(model, inputs=images, power=2), maps)
        code, _, err = run(capsys, "overlay", str(SHAPE), "--method", "brightness", "--option", "power=2",
                           "--out", str(tmp_path))
    finally:
        del METHODS["brightness"]
    patches = images.abs().mean(1).reshape(2, 8, 8, 8, 8).mean(dim=(2, 4))  # 64 px, 8-pixel patches
    assert torch.allclose(maps, patches ** 2, atol=1e-6)
    assert code == 0 and (tmp_path / "shapes_disk_brightness.png").is_file(), err


@pytest.mark.parametrize("budget", [0, -5])
def test_an_attention_budget_below_one_byte_is_refused(testbed, budget):
    model, images = testbed  # 0 was read as the default budget, -5 as blocks of one query row
    for verb in (vitroll.rollout, vitroll.attention):
        with pytest.raises(vitroll.errors.OptionValueError) as raised:
            verb(model, images, max_attention_memory=budget)
        assert str(raised.value) == f"max_attention_memory must be ≥ 1 byte, or None for the default; got {budget}"
