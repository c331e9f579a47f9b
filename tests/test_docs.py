"""``help()`` of every public function documents the parameters its signature has, by the same names, in order."""

from __future__ import annotations

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
