"""What the command line imports before any model work: a command's parser and the package itself import no
model library, so that ``vitroll --help`` and a usage error answer at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "timm", "transformers", "open_clip", "gradio", "matplotlib", "pydicom", "cv2")


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
