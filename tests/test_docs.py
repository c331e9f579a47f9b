"""``help()`` of every public function documents the parameters its signature has, by the same names, in order."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

import vitroll
from vitroll.methods.inputs import Inputs
from vitroll.methods.registry import documented_parameters

PUBLIC_FUNCTIONS = {name: getattr(vitroll, name) for name in vitroll.__all__
                    if inspect.isfunction(getattr(vitroll, name))}
VERBS = [*(name for name, function in PUBLIC_FUNCTIONS.items()
           if getattr(function, "__wrapped__", None) in {method.compute for method in vitroll.METHODS.values()}),
         "image_text_maps", "caption_maps", "overlay"]


def signature_names(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", sorted(PUBLIC_FUNCTIONS))
def test_documented_parameters_are_the_signatures(name):
    """A documented parameter the function does not take (renamed, removed) misleads the reader of help()."""
    documented = list(documented_parameters(inspect.getdoc(PUBLIC_FUNCTIONS[name])))
    assert [parameter for parameter in documented if parameter not in signature_names(PUBLIC_FUNCTIONS[name])] == []
    assert documented == [parameter for parameter in signature_names(PUBLIC_FUNCTIONS[name])
                          if parameter in documented], "in the signature's order"


@pytest.mark.parametrize("name", VERBS)
def test_every_verb_documents_every_parameter_and_what_it_returns(name):
    """The verbs documented some of their options only (flow neither head_fusion nor attention_weight, gradient_shap
    none), and none the text keywords every verb takes."""
    verb = PUBLIC_FUNCTIONS[name]
    doc = inspect.getdoc(verb)
    assert list(documented_parameters(doc)) == signature_names(verb)
    assert all(len(lines) > 1 for lines in documented_parameters(doc).values()), "each with a description"
    returns = doc.split("Returns\n-------\n")[1]
    assert "shape (" in returns.split("\n\n")[0] or name == "caption_maps", "the shape it returns"


@pytest.mark.parametrize("name", VERBS[:-3])
def test_every_method_verb_takes_its_inputs_by_the_name_its_signature_gives(name):
    """random_map and center advertised ``images``, which their verbs refused as a keyword (they take ``inputs``)."""
    assert signature_names(PUBLIC_FUNCTIONS[name])[:2] == ["model", "inputs"]
    assert typing.get_type_hints(PUBLIC_FUNCTIONS[name])["inputs"] is Inputs


def test_the_shared_entries_follow_the_methods_own_in_signature_order():
    doc = inspect.getdoc(vitroll.chefer)
    parameters = doc.split("Parameters\n----------\n")[1].split("\n\n")[0]
    assert parameters.startswith("model : nn.Module\n    A model of a registered family")
    assert "target_class : None, int, or B ints (sequence, array, tensor)\n    The class explained" in parameters
    assert parameters.index("position :") < parameters.index("target_class :") < parameters.index("start_layer :")
    assert all(len(line) <= 120 for line in doc.splitlines())


def numpydoc_entries(doc: str, section: str) -> list[str]:
    """The names a numpydoc ``section`` of ``doc`` documents, in order (``row, col : int`` gives both); [] without
    that section."""
    lines = doc.splitlines()
    starts = [index for index in range(len(lines) - 1)
              if lines[index] == section and lines[index + 1] == "-" * len(section)]
    if not starts:
        return []
    names = []
    for index in range(starts[0] + 2, len(lines)):
        if index + 1 < len(lines) and set(lines[index + 1]) == {"-"} and not lines[index].startswith(" "):
            break  # the next section's heading
        if lines[index].strip() and not lines[index].startswith(" "):
            names += [name.strip().lstrip("*") for name in lines[index].split(" : ")[0].split(",")]
    return names


def returns_section(doc: str) -> str:
    """The text of ``doc``'s Returns section, "" without one."""
    return doc.split("Returns\n-------\n")[1].split("\n\n")[0] if "Returns\n-------\n" in doc else ""


PUBLIC_CLASSES = {name: getattr(vitroll, name) for name in vitroll.__all__
                  if inspect.isclass(getattr(vitroll, name)) and ("__init__" in vars(getattr(vitroll, name))
                                                                  or dataclasses.is_dataclass(getattr(vitroll, name)))}
"""The public classes built from arguments of their own (the errors but ImageReadError take only a message)."""


@pytest.mark.parametrize("name", sorted(PUBLIC_FUNCTIONS))
def test_every_public_function_documents_each_parameter_what_it_returns_and_its_shape(name):
    """help() of thirteen public functions (load_image, upsample, normalize, colorize, …) had no Parameters section,
    load_model's missed num_classes and device, and ten that return a value had no Returns section: what an argument
    takes and what comes back, an array of which shape, were left to the source."""
    function = PUBLIC_FUNCTIONS[name]
    doc = inspect.getdoc(function)
    documented = numpydoc_entries(doc, "Parameters")
    assert [parameter for parameter in signature_names(function) if parameter not in documented] == []
    returned = inspect.signature(function).return_annotation
    if returned not in (None, "None"):
        assert returns_section(doc).strip(), "a Returns section"
    if any(kind in str(returned) for kind in ("ndarray", "Tensor")) and name != "caption_maps":
        assert "shape" in returns_section(doc), "the shape it returns"


@pytest.mark.parametrize("name", sorted(PUBLIC_CLASSES))
def test_every_public_class_documents_what_it_is_built_from(name):
    """KeyPatch, CropGeometry and ImageReadError documented none of their fields or arguments."""
    cls = PUBLIC_CLASSES[name]
    doc = inspect.getdoc(cls)
    documented = numpydoc_entries(doc, "Parameters") + numpydoc_entries(doc, "Attributes")
    assert [parameter for parameter in signature_names(cls) if parameter not in documented] == []


def test_the_section_reader_finds_entries_until_the_next_section():
    doc = "Head.\n\nParameters\n----------\nrow, col : int\n    The cell.\n*options\n    More.\n\nReturns\n-------\nx\n"
    assert numpydoc_entries(doc, "Parameters") == ["row", "col", "options"]
    assert numpydoc_entries(doc, "Attributes") == []
    assert returns_section(doc) == "x\n"
