"""What the command line imports before any model work: a command's parser and the package itself import no
model library, nor numpy, Pillow or OpenCV, so that ``vitroll --help`` and a usage error answer at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vitroll.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "timm", "transformers", "open_clip", "gradio", "matplotlib", "pydicom", "cv2", "numpy", "PIL")
"""What a command line imports only to do its work, never to parse: together ~0.4 s even for numpy and Pillow."""


def imported_after(code: str) -> dict[str, bool]:
    """Which of :data:`HEAVY` a fresh interpreter has imported after running ``code`` (from this checkout)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{name: name in sys.modules for name in {HEAVY!r}}}))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_command_line_imports_no_model_library():
    assert not any(imported_after("import vitroll.cli").values())


def test_the_command_list_imports_no_command_module_and_no_model_library():
    code = ("import contextlib, io, sys\nfrom vitroll.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):"
            "\n    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "assert not any(name.startswith('vitroll.commands.') for name in sys.modules), sorted(sys.modules)")
    assert not any(imported_after(code).values())


@pytest.mark.parametrize("name", ["rollout", "AttentionRecorder", "capture"])
def test_a_name_reached_through_the_package_finds_the_built_in_families(name):
    code = (f"import vitroll\nvitroll.{name}\nfrom vitroll.capture.families import FAMILIES\n"
            "assert 'vit' in {family.name for family in FAMILIES}, [family.name for family in FAMILIES]")
    assert imported_after(code)["timm"]


def test_a_public_name_stays_the_function_when_its_namesake_module_is_imported_first():
    code = ("import vitroll.overlay\nimport vitroll\nfrom vitroll import overlay\n"
            "assert callable(vitroll.overlay) and callable(overlay), (vitroll.overlay, overlay)")
    imported_after(code)


DEEP_IMPORTS = {
    "capture": "from vitroll.capture import AttentionRecorder\n"
               "with AttentionRecorder(model) as recorder:\n    model(images)\n"
               "values = recorder.attentions[-1]",
    "methods": "from vitroll.methods import rollout\nvalues = rollout(model, images)",
    "adapters": "from vitroll.adapters import register_family\nfrom vitroll.capture import family_of\n"
                "values = torch.tensor([len(family_of(model).attention_modules(model))])",
    "preprocess": "from PIL import Image\nfrom vitroll.preprocess import Preprocessing\n"
                  "values, _geometry = Preprocessing.from_model(model)(Image.new('RGB', (40, 50)))",
}
"""A deep import of each layer, as a user writes it without ``import vitroll``, and what it computes on a ViT."""


@pytest.mark.parametrize("layer", sorted(DEEP_IMPORTS))
def test_a_deep_import_in_a_fresh_interpreter_finds_timm_vits_and_records_their_attention(layer):
    """With the package's names imported on first use, the built-in families were registered only when a name was
    reached through `vitroll`: `from vitroll.capture import AttentionRecorder` on a timm ViT said 'supported
    families: .'; `Preprocessing.from_model(model)` as the first call, even after `import vitroll`, said the ViT
    belonged to no registered family."""
    code = ("import timm, torch\ntorch.manual_seed(0)\n"
            "model = timm.create_model('vit_tiny_patch16_224', img_size=32, depth=2).eval()\n"
            "images = torch.rand(1, 3, 32, 32)\n"
            f"{DEEP_IMPORTS[layer]}\nprint('SHAPE', tuple(values.shape), bool(torch.isfinite(values).all()))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    expected = {"capture": "(1, 5, 5)", "methods": "(1, 2, 2)", "adapters": "(1,)", "preprocess": "(3, 32, 32)"}[layer]
    assert done.stdout.splitlines()[-1] == f"SHAPE {expected} True"


def test_a_family_registered_before_any_lookup_still_takes_its_models_over_the_built_in_one():
    """The built-in families are registered at the first lookup; one a user registered before it must still win."""
    code = ("import dataclasses, timm\nfrom vitroll.capture.families import ModelFamily, add_family, family_of\n"
            "from timm.models.vision_transformer import VisionTransformer\n"
            "class Mine(VisionTransformer):\n    pass\n"
            "add_family(ModelFamily('mine', (Mine,), (), (), lambda m: [], lambda m, s: None))\n"
            "model = Mine(img_size=32, depth=1)\n"
            "print(family_of(model).name, family_of(timm.create_model('vit_tiny_patch16_224', img_size=32)).name)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["mine", "vit"]


def test_the_registries_read_first_hold_the_built_in_entries():
    code = ("from vitroll.capture.families import FAMILIES, REFUSALS\nfrom vitroll.capture.readouts import READOUTS\n"
            "names = [family.name for family in FAMILIES.copy()]\n"
            "assert names[:2] == ['vit', 'vit-relpos'] and FAMILIES.index(FAMILIES[0]) == 0, names\n"
            "assert len(READOUTS) > 3 and len(REFUSALS) > 3, (READOUTS, REFUSALS)")
    assert imported_after(code)["timm"]


def command_line_outcomes(command_lines: list[list[str]]) -> tuple[list[tuple[int, list[str]]], list[str]]:
    """For each command line, run in turn by :func:`vitroll.cli.main` in one fresh interpreter: its exit status and
    its stderr lines; then which of :data:`HEAVY` that interpreter had imported."""
    code = ("import contextlib, io, json, sys\nfrom vitroll.cli import main\noutcomes = []\n"
            f"for argv in {command_lines!r}:\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):\n"
            "        try:\n            status = main(argv)\n        except SystemExit as stop:\n"
            "            status = stop.code\n"
            "    outcomes.append((status, err.getvalue().splitlines()))\n"
            f"print(json.dumps([outcomes, [name for name in {HEAVY!r} if name in sys.modules]]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    outcomes, imported = json.loads(done.stdout.splitlines()[-1])
    return [(status, lines) for status, lines in outcomes], imported


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_s_help_and_its_usage_errors_import_no_model_library(command):
    """`vitroll overlay --help` (and `vitroll overlay --method nope x.png`) took seconds, importing torch and timm
    through the command's module, before it printed a line; then still ~0.4 s for numpy and Pillow (`vitroll.io`
    imported its image decoding for any of its modules), and `vitroll audit --help` imported OpenCV. The option is
    named even where an input is missing too (argparse said only `the following arguments are required: IMAGE`)."""
    outcomes, imported = command_line_outcomes([[command, "--help"], [command, "--no-such-option"]])
    assert outcomes[0] == (0, [])
    status, lines = outcomes[1]
    assert status == 2 and len(lines) == 1, lines
    assert lines[0] == (f"vitroll: error: {command}: unrecognized arguments: --no-such-option "
                        f"(see `vitroll {command} --help`)")
    assert imported == []


def test_a_device_is_checked_after_the_other_arguments_and_a_mistake_among_them_imports_no_model_library():
    outcomes, imported = command_line_outcomes([["overlay", "x.png", "--device", "cuda:99", "--method", "rolout"]])
    assert outcomes == [(2, ["vitroll: error: overlay: argument --method: invalid choice: 'rolout'; did you mean "
                             "rollout? (choose from attention, center, chefer, flow, grad_rollout, gradient_shap, "
                             "integrated_gradients, occlusion, random, rollout) (see `vitroll overlay --help`)"])]
    assert imported == []


def test_the_names_the_parsers_offer_are_those_of_the_library():
    """The parsers name methods, head fusions, precisions and defaults without importing the library (torch); they
    must not drift from it."""
    from vitroll.capture import HEAD_FUSIONS
    from vitroll.commands import annotate, arguments, evaluate
    from vitroll.methods import METHODS
    from vitroll.methods.caption import CAPTION_METHODS
    from vitroll.pipelines.evaluate import GENERATED_TESTBEDS
    from vitroll.pipelines.explain import ExplainSettings
    from vitroll.pipelines.folder import PRECISIONS, SAVE_KINDS, AnnotateOptions
    from vitroll.testbed import TESTBED_NAME

    assert arguments.METHOD_NAMES == tuple(sorted(METHODS))
    assert arguments.HEAD_FUSIONS == HEAD_FUSIONS
    assert arguments.CAPTION_METHODS == CAPTION_METHODS
    assert arguments.PRECISIONS == tuple(PRECISIONS)
    assert arguments.TESTBED_NAME == TESTBED_NAME
    assert arguments.DEFAULT_COLORMAP == ExplainSettings().cmap
    assert annotate.DISAGREE_BELOW == AnnotateOptions.disagree_below
    assert annotate.SAVE_KINDS == SAVE_KINDS
    assert list(evaluate.TESTBEDS) == ["shapes", *GENERATED_TESTBEDS]
