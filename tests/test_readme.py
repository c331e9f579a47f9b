"""The README's Python examples run as written, and the shapes their comments state are the shapes they give.

Each example is a ```` ```python ```` block of README.md, found by a line it contains. Its statements run one at a
time in the repository root (or a scratch folder with the sample images, for one that writes files); after a
statement whose comment states a shape, ``# (2, 14, 14)``, the name it assigned must hold a tensor or array of that
shape. Examples that need weights or folders a reader brings (``my-bert-classifier``, CLIP's) are not run here.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from vitroll.cli import build_parser
from vitroll.testbed.training import wrapped_card

ROOT = Path(__file__).resolve().parents[1]
STATED_SHAPE = re.compile(r"#\s*\((\d+(?:,\s*\d+)*)\)")


def python_block(containing: str) -> str:
    """The one Python block of README.md with a line containing ``containing``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [block.split("\n", 1)[1] for block in readme.split("```")[1::2] if block.startswith("python\n")]
    (block,) = [block for block in blocks if containing in block]
    return block


def run_checking_stated_shapes(block: str) -> dict[str, object]:
    """Run ``block`` statement by statement; check each stated shape; return its names."""
    names: dict[str, object] = {}
    lines = block.splitlines()
    checked = 0
    for statement in ast.parse(block).body:
        exec(compile(ast.Module(body=[statement], type_ignores=[]), "README.md", "exec"), names)
        stated = STATED_SHAPE.search(lines[statement.end_lineno - 1])
        if stated and isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
            value = names[statement.targets[0].id]
            expected = tuple(int(size) for size in stated.group(1).split(","))
            assert tuple(value.shape) == expected, lines[statement.lineno - 1]
            checked += 1
    assert checked, "no statement of the block states a shape"
    return names


def test_the_python_section_runs_as_written(monkeypatch):
    monkeypatch.chdir(ROOT)
    names = run_checking_stated_shapes(python_block('maps = rollout(model, "sample_images/cat.jpg")'))
    height, width = np.asarray(names["image"]).shape[:2]
    assert names["saliency"].shape == (height, width)  # "(H0, W0) in original pixels, NaN outside the crop"
    assert np.isnan(names["saliency"]).any() and not np.isnan(names["saliency"]).all()
    assert names["picture"].shape == (height, width, 3) and names["picture"].dtype == np.uint8
    assert str(names["maps"].device) == "cpu"  # "on the model's device"


def test_the_hugging_face_example_runs_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    (tmp_path / "sample_images").symlink_to(ROOT / "sample_images")
    monkeypatch.chdir(tmp_path)  # it saves the model folder tiny-vit/ where it runs
    run_checking_stated_shapes(
        python_block('transformers.ViTForImageClassification(config).save_pretrained("tiny-vit")'))
    assert capsys.readouterr().out.splitlines()[-1] == "['benign', 'malignant']"


def test_the_captioner_example_runs_as_written(monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.chdir(ROOT)
    block = python_block('vitroll.caption_maps(model, ["sample_images/two_shapes.png"]')
    generate, fields, own_caption = re.split(r"\n(?=result\.token_ids|result = vitroll.caption_maps\(model, images)",
                                             block.strip())
    names: dict[str, object] = {}
    exec(generate, names)
    result = names["result"]
    batch, tokens = result.token_ids.shape
    assert result.maps.shape[:2] == (batch, tokens) and result.lengths.shape == (batch,)
    assert "result.maps" in fields
    names.update(images=["sample_images/two_shapes.png"], ids=result.token_ids)
    exec(own_caption, names)  # "your caption, (B, K)"
    assert names["result"].maps.shape == result.maps.shape


def test_the_command_line_synopsis_names_every_sub_command_and_only_options_they_take():
    """Each ``vitroll CMD`` line of the README's synopsis (with its continuation lines) names options CMD has, and
    a ``--flag a|b|c`` lists exactly the flag's choices (``a|b|…`` some of them); every sub-command has a line."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    synopsis = readme.split("## Command line\n\n```\n", 1)[1].split("```", 1)[0]
    (commands,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    lines: dict[str, str] = {}
    for line in synopsis.splitlines():
        if line.startswith("vitroll "):
            command = line.split()[1]
            lines[command] = line
        else:
            lines[command] += line
    assert sorted(lines) == sorted(commands.choices)
    for command, line in lines.items():
        options = commands.choices[command]._option_string_actions
        for flag, values in re.findall(r"\[(--[a-z-]+)(?: ([^\]…]+))?", line):
            assert flag in options, f"{command} {flag}"
            if "|" in values and options[flag].choices is not None:  # `a|b|…` names some of them
                named = set(values.strip("|").split("|"))
                choices = set(options[flag].choices)
                assert named <= choices if values.endswith("|") else named == choices, f"{command} {flag} {values}"


def _words(path: Path) -> str:
    """The text of ``path`` with every run of white space one space (README paragraphs wrap anywhere)."""
    return " ".join(path.read_text(encoding="utf-8").split())


def test_the_text_models_accuracies_are_those_measured_on_the_set_named_beside_them():
    """The shortcut model's 49.9 % (its card: 2000 sentences) stood beside the bias study's 48.4 % (500 of them)
    with nothing saying that they are measured on different sets."""
    readme = _words(ROOT / "README.md")
    card = re.search(r"Held-out test accuracy: ([\d.]+)% on keyword data, ([\d.]+)% on shortcut data",
                     _words(ROOT / "vitroll/testbed/text_shortcut/MODEL_CARD.md"))
    on_keywords, on_shortcuts = card.groups()
    assert (f"measured by `scripts/train_text.py` on 2000 sentences of seed 3 of each kind): {on_shortcuts} % on its "
            f"own kind of data, **{on_keywords} %** on key-word data") in readme
    study = _words(ROOT / "docs/evaluation/text_bias.md")
    assert study.startswith("`python scripts/text_bias.py`: the first 500 held-out key-word sentences (seed 3)")
    (on_these,) = re.findall(r"shortcut model ([\d.]+)%", study)
    assert (f"the first 500 of the model cards' 2000 key-word sentences of seed 3; on these 500 the shortcut model is "
            f"right on {on_these} %, on all 2000 on the card's {on_keywords} %") in readme


LINE_CHECKED = ("README.md", "vitroll/**/*.py", "vitroll/**/*.j2", "vitroll/**/*.md", "scripts/*.py", "tests/**/*.py",
                "tests/**/*.md", "docs/*.md", "pyproject.toml")
"""The files whose lines are at most 120 characters: the README, the package (its HTML templates and the shipped
models' cards too), the scripts, the tests, the notes and tables the scripts write in docs/ (wrapped as they write
them) and pyproject.toml. Not docs/'s sub-folders: the outputs of ``vitroll evaluate``, ``vitroll sanity`` and
scripts/text_bias.py, kept as they wrote them."""


def test_no_line_of_the_readme_or_of_the_code_is_over_120_characters():
    """Table rows excepted (a Markdown row cannot wrap). The check read the README, the package's Python and the
    scripts only: the tests, the templates (one line of 573 characters) and the model cards had lines up to 271;
    docs/gpu_check.md had notes of 259 and pyproject.toml's description 256. Characters, not bytes: ``–`` is one."""
    files = sorted({path for pattern in LINE_CHECKED for path in ROOT.glob(pattern)})
    assert {path.suffix for path in files} == {".md", ".py", ".j2", ".toml"} and len(files) > 200
    assert {"docs/gpu_check.md", "pyproject.toml"} <= {str(path.relative_to(ROOT)) for path in files}
    long = [f"{path.relative_to(ROOT)}:{number}" for path in files
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > 120 and not line.lstrip().startswith("|")]
    assert not long, long


def test_a_model_card_is_wrapped_to_its_width_with_its_words_items_and_tables_kept():
    card = ("# T\n\none two three four five six seven eight nine ten\n- item alpha beta gamma delta epsilon zeta eta\n"
            f"  theta\n- `{'x' * 24}` end\n\n| a | b c d e f g h i j k l m n o p |\n")
    wrapped = wrapped_card(card, width=20)
    assert wrapped == ("# T\n\none two three four\nfive six seven eight\nnine ten\n- item alpha beta\n  gamma delta\n"
                       f"  epsilon zeta eta\n  theta\n- `{'x' * 24}`\n  end\n\n| a | b c d e f g h i j k l m n o p |\n")
    assert wrapped_card(wrapped, width=20) == wrapped


def test_a_model_card_is_wrapped_so_that_no_line_starts_another_markdown_block():
    """A break before ``-``, ``=`` or ``2.`` made the rest of a paragraph a list item, a heading's underline or a
    numbered list: the card rendered otherwise than the one long line, and wrapping it again changed it."""
    card = "- mean = std = 0.5 and 1 - 2 and step 2. of 3 # and > and | and + and * end\n"
    for width in range(12, 40):
        wrapped = wrapped_card(card, width=width)
        continued = [line[2:] for line in wrapped.splitlines()[1:]]
        assert all(line.startswith("  ") for line in wrapped.splitlines()[1:]), wrapped
        assert not [line for line in continued if re.match(r"(?:[-+*>#|=]+|\d+[.)])(?: |$)", line)], wrapped
        assert " ".join(wrapped.split()) == " ".join(card.split()) and wrapped_card(wrapped, width=width) == wrapped


def _readme_commands() -> list[str]:
    """Every ``vitroll …`` command the README shows: in ```` ```bash ```` blocks (``&&`` chains and ``\\`` line
    continuations followed, comments dropped) and in inline code spans, but for bare verb names (``vitroll audit``)
    and patterns with placeholders (``vitroll methods NAME``, ``vitroll text ... --method …``)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in readme.split("```")[1::2]:
        if block.startswith("bash\n"):
            for line in block.removeprefix("bash\n").replace("\\\n", " ").splitlines():
                commands += [part.split("#")[0].strip() for part in line.split("&&")]
    commands += re.findall(r"(?<!`)`(vitroll [^`]+)`(?!`)", re.sub(r"\s*\n\s*", " ", readme))
    return [command for command in commands if command.startswith("vitroll ") and len(command.split()) > 2
            and not any(re.fullmatch(r"[A-Z][A-Z_]+…?|\.\.\.|…", word) for word in command.split())]


def test_every_vitroll_command_the_readme_shows_parses(tmp_path, monkeypatch):
    """Options renamed or dropped from a command stayed in the README's examples with nothing to catch them. A
    ``--device cuda`` example is read on a CPU as ``--device cpu`` (the device is checked while parsing), and the
    class-names file the examples name is there (it is read while parsing)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "classes.txt").write_text("cat\ndog\n", encoding="utf-8")
    commands = _readme_commands()
    assert len(commands) > 20
    for command in commands:
        argv = ["cpu" if word.startswith("cuda") else word for word in shlex.split(command)[1:]]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exit:
            assert exit.code == 0, command
