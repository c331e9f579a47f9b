"""CLI sub-commands. The module ``vitroll.commands.NAME`` of each command in :data:`COMMANDS` defines
``register(parser)``, which gives the command's parser its description and arguments and binds its
``run(args) -> int``. Its arguments come from :mod:`vitroll.commands.arguments`; what imports torch (models, methods,
pipelines, :mod:`vitroll.commands.common`) it imports in ``run`` and its helpers, so that ``vitroll CMD --help`` and a
usage error import no model library (tests/test_startup.py)."""

COMMANDS = {
    "overlay": "write saliency overlays for images and print top-5 classes",
    "annotate": "explain every image of a folder or list, resumably",
    "audit": "PHI-free saliency audit of DICOM/PNG/TIFF images (HTML, CSV, JSON)",
    "compare": "compare the maps of several models on the same images",
    "evaluate": "score methods against ground-truth masks",
    "sanity": "do the maps change when the model's weights are randomised?",
    "text": "token and word scores of a text model, in the terminal and as HTML",
    "caption": "caption images and map each word of the caption on the image",
    "app": "interactive explorer in the browser (needs vitroll[app])",
    "models": "list supported families and timm models matching a pattern",
    "methods": "list the saliency methods with their options and defaults",
}
"""Each command's name (that of its module) and its line in ``vitroll --help``: listing the commands imports none of
their modules."""
