"""The interactive explorer's page (Gradio): upload or pick an image, move the controls, see the map change.

This module only lays out the page and turns its widgets' values into
:class:`~vitroll.pipelines.explorer.ExplorerControls`; what is computed lives in
:mod:`vitroll.pipelines.explorer`. Gradio is imported when a page is built, so the rest of vitroll runs without it.
"""

from __future__ import annotations

import functools
import hashlib
import html
import os
import sys
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn

from vitroll.errors import ImageReadError, VitrollError
from vitroll.io import load_image
from vitroll.io.images import (
    DEFAULT_MAX_PIXELS, encode_png, has_alpha, load_image_with_display, pillow_limit_lifted, print_warning,
)
from vitroll.methods import method_named
from vitroll.methods.map_checks import constancy, near_constant
from vitroll.pipelines.explain import (
    ExplainSettings, enlarged_warning, little_seen_warning, render, whole_image_setting,
)
from vitroll.pipelines.explorer import (
    ExplorerControls, ModelOutline, explore, ignored_controls, model_outline, offered_methods, scored_model,
)
from vitroll.pipelines.legend import legend_html
from vitroll.preprocess import Preprocessing
from vitroll.wording import PageControl, worded_for_a_page

if TYPE_CHECKING:
    import gradio

ALL_HEADS = "all"
PREDICTED = "predicted"
API_NAME = "explain"
"""The endpoint a ``gradio_client.Client`` calls: ``client.predict(image, method, …, api_name="/explain")``."""
FULL_SIZE_API_NAME = "full_size_overlay"
"""The endpoint that writes the last overlay :data:`API_NAME` gave this session at the image's full size."""
PAGE_CONTROLS = {"discard_ratio": PageControl("discard ratio", "slider", minimum=Fraction(0), maximum=Fraction("0.99"),
                                               step=Fraction("0.01"))}
"""The method options the page sets with a control, by that control: the warnings of a method run for the page name
it (:func:`~vitroll.wording.worded_for_a_page`), not the command line's flag, and advise values it can be set to."""
DEFAULT_PROMPTS = ("a photo of a cat", "a photo of a dog")
"""The prompts an image–text model's page starts with."""
PICTURE_BUTTONS = ("download", "fullscreen")
"""The buttons on the page's pictures: Gradio's default also has "share", which uploads the picture to huggingface.co,
off this machine (a patient's image, perhaps), from a page that is not served beyond it unless asked."""
DISPLAY_SIDE = 2048
"""Pixels: the longest side of the overlay sent to the page, about what a screen shows. At full size a 24 MP photo's
overlay was a 37 MB PNG, encoded for seconds on every slider move; the full size is downloaded on demand."""
MAP_MIN_WIDTH = 300
"""Pixels: the overlay and the head grid, and the top classes and the note, share a row where each gets this much,
else they stack."""
PAGE_CSS = """
#image .upload-container { width: 100% !important; }  /* over Gradio's inline width: auto */
#image .image-frame, #overlay .image-frame, #heads .image-frame { width: 100%; }
#image img, #overlay img, #heads img { width: 100%; height: auto; max-height: 70vh; object-fit: contain;
                                      min-height: 12em; }
"""
"""The page's pictures as wide as their boxes, a tall one no taller than most of the window, a wide one drawn in the
middle of a box at least 12em high: Gradio shows a picture at most at its own size, so an 8×8 image and its overlay
were an 8-pixel strip under their boxes' buttons, and its label and buttons covered all of a 2000×200 panorama, 34
pixels high in its box."""
PAGE_JS = """
() => {
  const name = image => decodeURIComponent(new URL(image.src).pathname.split("/").pop());
  const shownName = image => document.querySelector("#file-name bdi")?.textContent || name(image);
  const pictures = {"#examples img": name, "#image img": image => "image: " + shownName(image),
                    "#overlay img": () => "overlay", "#heads img": () => "heads of the chosen layer"};
  const label = () => {
    Object.entries(pictures).forEach(([selector, text]) => {
      document.querySelectorAll(selector).forEach(image => {
        if (image.alt !== text(image)) image.alt = image.title = text(image);
      });
    });
    document.querySelectorAll("#full-size-file a[download]").forEach(link => {
      const text = `download ${link.download} (${link.textContent.replace(/[⇣\\s]+/g, " ").trim()})`;
      if (link.getAttribute("aria-label") !== text) link.setAttribute("aria-label", text);
    });
  };
  document.addEventListener("error", event => {  // a file the browser cannot draw: the preview under it shows it
    if (event.target.matches?.("#image img")) event.target.style.visibility = "hidden";
  }, true);
  document.addEventListener("load", event => {
    if (event.target.matches?.("#image img")) event.target.style.visibility = "";
  }, true);
  new MutationObserver(label).observe(document.body, {childList: true, subtree: true, attributes: true,
                                                      attributeFilter: ["src"]});
  label();
  const sliderKeys = ["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End", "PageUp", "PageDown"];
  document.addEventListener("keyup", event => {
    const box = event.target;
    if ((box.matches?.("input[type=range]") && sliderKeys.includes(event.key)) ||
        (box.matches?.("input[type=number]") && event.key === "Enter")) {
      box.dispatchEvent(new PointerEvent("pointerup", {bubbles: true}));
    }
  });
  const released = new WeakMap();
  const isSlider = box => box.matches?.("input[type=range], input[type=number]");
  document.addEventListener("focusin", event => {
    if (isSlider(event.target)) released.set(event.target, event.target.value);
  });
  const once = event => {
    const box = event.target;
    if (!isSlider(box)) return;
    if (released.get(box) === box.value) event.stopImmediatePropagation();
    else released.set(box, box.value);
  };
  document.addEventListener("pointerup", once, true);
  document.addEventListener("blur", once, true);
}
"""
"""Gives each example's thumbnail its file's name (Gradio's server copy keeps the name, in a folder of its own) as its
text and tooltip, and the image (by the name under it), the overlay and the head grid theirs: Gradio draws them with
an empty ``alt``, so a screen reader said only "button" for each example and for the overlay and the grid (each a Tab
stop), and the full-size overlay's download link by its file: a screen reader said only its size ("35.0 KB ⇣").
Hides the image box's picture while the browser cannot draw it (a TIFF: a broken picture; a preview is shown under
it). Lets a slider moved by its keys, or its number box left with Enter, explain again as letting go of the mouse does:
Gradio's slider tells that it was let go (``release``) only on a pointer's release or on leaving the number
box, so the keyboard changed the value and not the maps. A slider let go at the value it was last let go at (or had
when it got the focus) tells nothing: Enter and then leaving the box, or a click into the box, explained the same
value again."""
COLORMAPS = ("jet", "turbo", "viridis", "inferno", "magma", "cividis", "gray")
"""The colormap menu: the default and its smoother cousin, the perceptually uniform ones, grey (``--cmap`` of the
other commands takes any matplotlib name)."""


@dataclass(frozen=True)
class ShownOverlay:
    """What a session keeps of the overlay last shown, to draw it again at full size on demand: the server's copy of
    the image and the map on the model's grid, some kB. Kept whole, a 24 MP photo's overlay held 72 MB per session
    (Gradio keeps up to 10 000) until the session ended, for a download that is seldom asked for."""

    image: str
    """The server's copy (Gradio's) of the file uploaded or picked."""
    grid_map: np.ndarray
    """(h, w) float32: :attr:`~vitroll.pipelines.explorer.Exploration.grid_map`."""
    settings: ExplainSettings
    """How it was drawn (the colormap chosen)."""

    @property
    def key(self) -> str:
        """A digest of what the overlay is drawn from (the image's copy, the map, the drawing): the same for the same
        overlay, explained again or asked for again."""
        drawn = (self.image, self.grid_map.shape, self.grid_map.dtype.str, self.settings)
        digest = hashlib.sha256(repr(drawn).encode())
        digest.update(np.ascontiguousarray(self.grid_map).tobytes())
        return digest.hexdigest()

    def overlay(self, preprocessing: Preprocessing, max_pixels: Optional[int], warn: Callable[[str], None],
                ) -> np.ndarray:
        """The overlay (H0, W0, 3) uint8 as :func:`~vitroll.pipelines.explorer.explore` drew it; ``warn`` is told what
        :func:`~vitroll.io.images.load_image_with_display` warns of.

        Raises
        ------
        ImageReadError
            When the image can no longer be read.
        """
        stored, display = load_image_with_display(self.image, max_pixels=max_pixels, warn=warn)
        picture = np.asarray(stored if display is None else display)
        return render(picture, self.grid_map, preprocessing.geometry(picture.shape[:2]), self.settings)[1]


def require_gradio() -> "Any":
    """The ``gradio`` module; without it, one :class:`VitrollError` naming the ``app`` extra."""
    try:
        import gradio
    except ImportError:
        raise VitrollError('the explorer needs gradio: pip install "vitroll[app]"') from None
    return gradio


def controls_from_widgets(method: str, head_fusion: str, discard_ratio: float, start_layer: float, layer: float,
                          head: str, target_class: str, prompts: str = "") -> ExplorerControls:
    """The widgets' values (sliders give floats, dropdowns strings, the prompts box one prompt per line) as
    controls.

    Raises
    ------
    MethodOptionError
        For a layer or start layer that is not a whole number.
    ValueError
        For a target class that is neither :data:`PREDICTED` nor an index (:func:`target_index`).
    """
    return ExplorerControls(
        method=method, head_fusion=head_fusion, discard_ratio=float(discard_ratio), start_layer=whole(start_layer),
        layer=whole(layer), head=None if head == ALL_HEADS else int(head),
        target_class=None if target_class == PREDICTED else target_index(target_class), prompts=prompt_lines(prompts),
    )


def target_index(choice: str) -> int:
    """The class (or prompt) index a target-class menu value names; an image–text model's menu takes typed values
    (its prompts change on the page), so a prompt's text typed there is refused, naming what the menu takes."""
    if not (choice.isascii() and choice.isdigit()):
        raise ValueError(f"target class: {choice!r} is not offered; choose {PREDICTED!r} or a prompt's number from "
                         "the menu (0 for the first prompt)")
    return int(choice)


def whole(number: float) -> "int | float":
    """A slider's value as an int where it is a whole number (a slider gives 2.0), else as it is, for
    :class:`ExplorerControls` to refuse: rounding a layer 0.5 to 0 would explain another layer than the one asked
    for."""
    return int(number) if isinstance(number, float) and number.is_integer() else number


def prompt_lines(text: str) -> tuple[str, ...]:
    """The prompts of the prompts box: one per line, surrounding blanks and blank lines dropped."""
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def target_choices(class_names: Sequence[str], *, image_text: bool) -> list[tuple[str, str]]:
    """The target-class menu as (label, value) pairs: the best-scoring class (or prompt), then each by index."""
    best = ("best-scoring prompt" if image_text else "predicted class", PREDICTED)
    return [best] + [(f"{k}: {name}", str(k)) for k, name in enumerate(class_names)]


def target_menu_update(prompts: str, target_class: str) -> "Any":
    """The target-class menu for new prompts: their choices, the chosen prompt kept while it still exists."""
    lines = prompt_lines(prompts)
    still_there = target_class.isdigit() and int(target_class) < len(lines)
    kept = target_class if still_there else PREDICTED
    return require_gradio().update(choices=target_choices(lines, image_text=True), value=kept)


def ignored_note(method: str, ignored: Sequence[str], layer: int, *, target_menu: bool = True) -> str:
    """One Markdown line: which controls ``method`` does not use, and which layer the head grid shows.
    ``target_menu``: whether the page has a target-class menu (a backbone's has none, so it is not named)."""
    ignored = [label for label in ignored if target_menu or label != "target class"]
    unused = f"**{method}** does not use: {', '.join(ignored)}." if ignored else f"**{method}** uses every control."
    return f"{unused} The per-head grid shows layer {layer}."


def constant_map_note(grid_map: np.ndarray, method: str, discard_ratio: Optional[float]) -> str:
    """One Markdown line when ``grid_map`` (h, w) is constant or near-constant
    (:func:`~vitroll.methods.map_checks.near_constant`: the server's terminal tells of the same maps, naming the
    slider too, :data:`PAGE_CONTROLS`), naming the page's control that may be the cause: the discard ratio, when
    ``method`` used one above 0 (``discard_ratio``; None when it ignores the slider); empty otherwise. (``occlusion``
    of a uniform image is constant too: no attention is to blame there.)"""
    values = torch.from_numpy(np.ascontiguousarray(grid_map[np.isfinite(grid_map)]))
    if values.numel() < 2 or not near_constant(values):
        return ""
    kind, values_told = constancy(values)
    shown = ("the overlay is one colour and shows nothing." if kind == "constant" else
             "the overlay stretches that spread over the whole colormap and shows nothing the model tells apart.")
    note = f"**The map is {kind}** ({values_told}): {shown}"
    if discard_ratio:
        return (f"{note} A discard ratio of {discard_ratio:g} drops that share of each row's weakest attention; with "
                "this model's few tokens it can leave none but the class token's: a lower **discard ratio** (its "
                "slider) keeps more.")
    return f"{note} **{method}** finds no patch different from another."


class UploadPath(str):
    """The path of the server's copy of an upload or example, as the image box gives it, and :attr:`user_name`: the
    name the user gave the file. Gradio names its copy without ``*<>|?:"`` and cuts a name over 200 bytes."""

    user_name: str

    def __new__(cls, path: str, user_name: str) -> "UploadPath":
        copy = super().__new__(cls, path)
        copy.user_name = user_name
        return copy


def user_name(image: str) -> str:
    """The name the user gave the file whose server copy is at ``image``: its :class:`UploadPath` name, else the
    copy's."""
    return getattr(image, "user_name", None) or Path(image).name


def file_caption(image: Optional[dict[str, Any]]) -> str:
    """The line under the image naming its file, from what the image box sends (``path`` of the server's copy,
    ``orig_name``…): the name alone, as the user named it, as text, also for a file that is no image; empty before an
    image is loaded."""
    if image is None:
        return ""
    name = image.get("orig_name") or Path(image["path"]).name
    return f'<p class="vitroll-file">file: <bdi>{html.escape(name, quote=False)}</bdi></p>'


BROWSER_FORMATS = frozenset({"PNG", "JPEG", "GIF", "WEBP", "AVIF", "BMP", "ICO", "MPO"})
"""The image formats (Pillow's names; MPO: a phone's JPEG with a depth image) every current browser draws; the image
box shows the uploaded file itself, and showed a TIFF (JPEG 2000, PPM, TGA…) as a broken picture."""


def preview_reason(path: "str | os.PathLike[str]") -> Optional[str]:
    """Why the image box does not show the picture explained, in a few words: a format a browser cannot draw (the box
    showed a TIFF as a broken picture), frames (the box plays an animated GIF; its first frame is explained), or
    transparent pixels (the box shows the page's background through them, dark in a dark theme, where
    :func:`~vitroll.io.load_image` composites them on white; Gradio hands the file over unchanged). None when it
    does, or when the file is no image Pillow can open (refused when it is explained)."""
    try:
        with Image.open(path) as image:
            kind, frames, transparent = image.format, getattr(image, "n_frames", 1), has_alpha(image)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None
    if kind not in BROWSER_FORMATS:
        return f"{kind}: browsers cannot draw it; as decoded:"
    if frames > 1 and kind != "MPO":
        return f"{kind} of {frames} frames: the first is explained:"
    return f"{kind} with transparent pixels: explained on white:" if transparent else None


def preview_picture(path: "str | os.PathLike[str]", max_pixels: Optional[int],
                    load: Callable[..., tuple[Image.Image, Optional[Image.Image]]] = load_image_with_display,
                    ) -> Optional[np.ndarray]:
    """(H, W, 3) uint8, at most :data:`DISPLAY_SIDE` a side: the picture the maps are drawn on (decoded as the model
    reads it, in sRGB, by ``load``: :func:`~vitroll.io.images.load_image_with_display` or a page's
    :meth:`DecodedImages.load`), for an image file the image box does not show as it is explained
    (:func:`preview_reason`); None for one it shows, or one that cannot be read (refused when it is explained, with
    its reason)."""
    if preview_reason(path) is None:
        return None
    try:
        stored, display = load(path, max_pixels=max_pixels, warn=lambda message: None)
    except ImageReadError:
        return None
    return display_copy(np.asarray(stored if display is None else display))


def display_copy(picture: np.ndarray, side: int = DISPLAY_SIDE) -> np.ndarray:
    """``picture`` (H, W, 3) uint8 shrunk (Lanczos, aspect kept) to a longest side of ``side`` pixels, or itself when
    it is no larger."""
    if max(picture.shape[:2]) <= side:
        return picture
    copy = Image.fromarray(picture)
    copy.thumbnail((side, side), Image.Resampling.LANCZOS)
    return np.asarray(copy)


def example_images(folder: "str | os.PathLike[str]") -> list[Path]:
    """The images of ``folder`` to offer as examples (masks, named ``*_mask.png``, left out), sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir()
                  if path.suffix.lower() in (".png", ".jpg", ".jpeg") and not path.stem.endswith("_mask"))


def build_app(model: nn.Module, *, model_label: str, preprocessing: Optional[Preprocessing] = None,
              class_names: Optional[list[str]] = None, examples: Sequence[Path] = (),
              settings: ExplainSettings = ExplainSettings(),
              max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> "gradio.Blocks":
    """The explorer page for ``model`` (served with :func:`serve`; tested through ``gradio_client`` at
    :data:`API_NAME`).

    Parameters
    ----------
    model : nn.Module
        Runs on its own device; one request at a time.
    model_label : str
        Shown in the page's title line.
    preprocessing : Preprocessing, optional
        Default: the model's own (:meth:`Preprocessing.from_model`).
    class_names : list of str, optional
        Names for the top classes and the target-class menu.
    examples : sequence of Path
        Images offered under the upload box.
    settings : ExplainSettings
        How the overlays are drawn (opacity, upsampling, normalisation), and the colormap the menu starts at (added to
        :data:`COLORMAPS` when not among them); the method and its options are the controls'.
    max_pixels : int, optional
        The largest upload to decode (:func:`~vitroll.io.load_image`; None: any size); a larger one is refused in one
        line.

    Raises
    ------
    ValueError
        For an image–text model that cannot read prompts (no tokenizer).

    Notes
    -----
    The colormap menu is the input of :data:`API_NAME` after the target class; the legend follows it. For an
    image–text model the page has a prompts box (one prompt per line, :data:`DEFAULT_PROMPTS` at first), the last
    input of :data:`API_NAME`; the target-class menu lists the prompts.
    """
    # before its components are made (each names its cache folder then, and the examples are copied into it), and
    # before Gradio is imported where it was not (it names some folders then): as `vitroll app` holds it
    PRIVATE_CACHE.acquire()
    try:
        return _page(model, model_label=model_label, preprocessing=preprocessing, class_names=class_names,
                     examples=examples, settings=settings, max_pixels=max_pixels)
    except BaseException:
        PRIVATE_CACHE.release()
        raise


def _page(model: nn.Module, *, model_label: str, preprocessing: Optional[Preprocessing],
          class_names: Optional[list[str]], examples: Sequence[Path], settings: ExplainSettings,
          max_pixels: Optional[int]) -> "gradio.Blocks":
    """:func:`build_app`'s page, :data:`PRIVATE_CACHE` held (released by its ``close()``)."""
    gr = require_gradio()
    preprocessing = preprocessing or Preprocessing.from_model(model)
    outline = model_outline(model, preprocessing, class_names)
    if outline.image_text:
        scored_model(model, DEFAULT_PROMPTS)  # a model without a tokenizer is refused now, not on every request
    warned = WarningsGiven()
    decoded = DecodedImages()

    def warn_once(image: str, request: "gradio.Request") -> Callable[[str], None]:
        """A ``warn`` for :func:`load_image_with_display` that tells a warning about ``image`` on the server's terminal
        and on the page the first time in each session only: each slider moved read the image again, and said it
        again; and once for the whole server, a second user of the same image (Gradio names its copy by the
        content) was never told."""

        def warn(message: str) -> None:
            if warned.first_time(str(request.session_hash), str(image), message):
                print_warning(message)
                gr.Warning(html.escape(message, quote=False))

        return warn

    @given_the_request
    def run(request: "gradio.Request", image: Optional[str], method: str, head_fusion: str, discard_ratio: float,
            start_layer: float, layer: float, head: str, target_class: str, cmap: str = settings.cmap,
            prompts: str = "") -> tuple:
        if image is None:
            return None, None, None, "Upload an image or pick an example.", None
        try:
            drawn = replace(settings, cmap=cmap)  # how the overlay is drawn, and drawn again at full size
            controls = controls_from_widgets(method, head_fusion, discard_ratio, start_layer, layer, head, target_class,
                                             prompts)
            stored, display = decoded.load(image, max_pixels=max_pixels, warn=warn_once(image, request))
            with worded_for_a_page(PAGE_CONTROLS):
                exploration = explore(model, np.asarray(stored), controls, preprocessing=preprocessing,
                                      class_names=class_names, settings=drawn,
                                      display=None if display is None else np.asarray(display))
        except ImageReadError as error:
            raise refusal(upload_refusal(error, user_name(image))) from None
        except (VitrollError, ValueError) as error:
            raise refusal(str(error)) from None
        top = {name: probability for _, name, probability in exploration.top}
        used_ratio = None if "discard ratio" in exploration.ignored else controls.discard_ratio
        geometry = preprocessing.geometry((stored.height, stored.width))  # np.asarray would copy every pixel
        enlarged = enlarged_warning(geometry.pixels_per_patch(exploration.grid_map.shape))
        little_seen = little_seen_warning(geometry.seen_share())
        notes = [ignored_note(method, exploration.ignored, controls.layer, target_menu=outline.has_classes),
                 constant_map_note(exploration.grid_map, method, used_ratio),
                 "" if enlarged is None else f"**{enlarged[0].upper()}{enlarged[1:]}**.",
                 "" if little_seen is None else (f"**{little_seen[0].upper()}{little_seen[1:]}**: "
                                                 f"`{whole_image_setting('app', 'build_app')}` shows the model all "
                                                 "of it, padded.")]
        return (display_copy(exploration.overlay), exploration.head_grid, top or None,
                "\n\n".join(note for note in notes if note), ShownOverlay(image, exploration.grid_map, drawn))

    downloads = tempfile.TemporaryDirectory(prefix="vitroll-explorer-")  # removed with the page
    written: dict[str, Path] = {}  # ShownOverlay.key: its file, written on the first request, then offered again

    @given_the_request
    def full_size(shown: Optional[ShownOverlay], request: "gradio.Request") -> "Any":
        if shown is None:
            raise refusal("Explain an image first: its overlay at full size is then written here.")
        key = shown.key  # a digest of the whole map: taken once a request
        path = written.get(key)
        if path is None or not path.is_file():
            try:
                overlay = shown.overlay(preprocessing, max_pixels, warn_once(shown.image, request))
            except ImageReadError as error:  # Gradio's copy of the upload is gone
                raise refusal(f"{error.reason}: upload the image again") from None
            path = Path(tempfile.mkdtemp(dir=downloads.name)) / f"{Path(shown.image).stem}_overlay.png"
            path.write_bytes(encode_png(overlay))
            written[key] = path
        return gr.File(str(path), visible=True)

    first_ignored = ignored_controls("rollout", image_text=outline.image_text)

    def caption_and_preview(payload: Optional[dict[str, Any]]) -> tuple:
        """The line naming the file, and a preview of a file its box does not show as it is explained (a TIFF, shown
        broken; an animated GIF)."""
        picture = None if payload is None else preview_picture(payload["path"], max_pixels, decoded.load)
        label = "" if picture is None else preview_reason(payload["path"])
        return file_caption(payload), gr.Image(picture, label=label, visible=picture is not None)

    with gr.Blocks(title="vitroll explorer", analytics_enabled=False) as app:
        gr.Markdown(f"### vitroll explorer — {model_label}: {_describe(outline)}, on {_device_of(model)}")
        with gr.Row():
            with gr.Column(scale=1):
                image = _refusing_unreadable_uploads(gr.Image(type="filepath", image_mode=None,
                                                              sources=["upload", "clipboard"], label="image",
                                                              elem_id="image", buttons=list(PICTURE_BUTTONS)))
                file_name = gr.HTML(file_caption(None), elem_id="file-name")
                preview = gr.Image(label="preview", type="numpy", format="png", interactive=False, visible=False,
                                   elem_id="preview", buttons=["fullscreen"])
                picked = gr.Examples([[str(path)] for path in examples], inputs=[image], label="examples",
                                     elem_id="examples") if examples else None
                controls = [_refusing_values_off_the_menu(widget) for widget in _control_widgets(gr, outline)]
                colormap = _refusing_values_off_the_menu(gr.Dropdown(list(dict.fromkeys((*COLORMAPS, settings.cmap))),
                                                                     value=settings.cmap, label="colormap"))
                prompts = [gr.Textbox("\n".join(DEFAULT_PROMPTS), lines=3, label="prompts (one per line)",
                                      elem_id="prompts")] if outline.image_text else []
                button = gr.Button("Explain", variant="primary")
            with gr.Column(scale=2):
                with gr.Row():  # one above the other in a narrow window: side by side, the heads' labels are specks
                    overlay = gr.Image(format="png", type="numpy", label="overlay", interactive=False,
                                       elem_id="overlay", min_width=MAP_MIN_WIDTH, buttons=["fullscreen"])
                    grid = gr.Image(format="png", type="numpy", label="heads of the chosen layer", show_label=False,
                                    interactive=False, elem_id="heads", min_width=MAP_MIN_WIDTH,
                                    buttons=list(PICTURE_BUTTONS))  # its tiles are labelled
                legend = gr.HTML(legend_html(settings.cmap, settings.normalization), elem_id="legend")
                with gr.Row():  # the page shows at most DISPLAY_SIDE pixels: the download is the full size
                    full_size_button = gr.Button("overlay at full size (PNG)", elem_id="full-size", size="sm")
                    full_size_file = gr.File(label="overlay at full size", visible=False, elem_id="full-size-file")
                shown = gr.State()
                with gr.Row():  # stacked in a narrow window too: at 320 pixels the note beside them was 80 wide
                    top = gr.Label(num_top_classes=5, label="top classes", elem_id="top-classes",
                                   visible=outline.has_classes, min_width=MAP_MIN_WIDTH)  # else an empty box
                    with gr.Column(min_width=MAP_MIN_WIDTH):  # a Markdown's own min_width is not kept
                        note = gr.Markdown(ignored_note("rollout", first_ignored, outline.layers - 1,
                                                        target_menu=outline.has_classes), elem_id="note")
        method, head_fusion, discard_ratio, start_layer, layer, head, target = controls
        # the user's uploads and clears, and an example picked: once each. Gradio's image box tells a change twice for
        # every upload once an example was picked, and explained that upload twice.
        caption_event = dict(fn=caption_and_preview, inputs=image, outputs=[file_name, preview], preprocess=False,
                             queue=False)
        image.input(**caption_event, api_name=False)
        inputs = [image, *controls, colormap, *prompts]
        explain_event = dict(fn=preprocessing_here(run, inputs), inputs=inputs, preprocess=False,
                             outputs=[overlay, grid, top, note, shown], concurrency_limit=1, concurrency_id="model")

        def explain_on(listener: Callable[..., Any], api_name: "str | bool" = False) -> None:
            """``listener`` (an event's listener, or ``.then``) explains; when that fails (a refusal: a file that is no
            image, a value off the menu) the page shows no overlay, and forgets the last one: the full-size button
            offered it as if it were the refused file's."""
            listener(**explain_event, api_name=api_name).failure(
                lambda: (None, gr.File(None, visible=False)), outputs=[shown, full_size_file], api_name=False,
                queue=False)

        explain_on(button.click, API_NAME)
        full_size_button.click(full_size, inputs=shown, outputs=full_size_file, api_name=FULL_SIZE_API_NAME)
        # a new overlay makes the file written for the last one stale
        overlay.change(lambda: gr.File(None, visible=False), outputs=full_size_file, api_name=False, queue=False)
        if picked is not None:
            picked.load_input_event.then(**caption_event, api_name=False)
            explain_on(picked.load_input_event.then)
        # the target menu's own input only: when new prompts reset it, their event explains once
        explain_on(functools.partial(gr.on, [image.input, head_fusion.change, target.input, discard_ratio.release,
                                             start_layer.release, layer.release]))
        widgets = [head_fusion, discard_ratio, start_layer, layer, head, target]
        explain_on(method.change(lambda name, one: _widget_updates(name, one, method_changed=True),
                                 inputs=[method, head], outputs=widgets, api_name=False).then)
        explain_on(head.change(lambda name, one: _widget_updates(name, one, method_changed=False),
                               inputs=[method, head], outputs=widgets, api_name=False).then)
        explain_on(colormap.change(lambda cmap: legend_html(cmap, settings.normalization), inputs=colormap,
                                   outputs=legend, api_name=False).then)
        for box in prompts:  # leaving the box re-reads the prompts: the menu first, then the maps and scores
            explain_on(box.blur(target_menu_update, inputs=[box, target], outputs=target, api_name=False).then)
        app.unload(given_the_request(lambda request: warned.forget(str(request.session_hash))))
    close = app.close
    released = threading.Event()

    def close_and_remove_copies(verbose: bool = True) -> None:
        close(verbose)
        if not released.is_set():
            released.set()
            downloads.cleanup()
            PRIVATE_CACHE.release()

    app.close = close_and_remove_copies
    return app


DECODED_KEPT = 2
"""The most decoded images :class:`DecodedImages` keeps for a page."""


class DecodedImages:
    """The images a page decoded last, by the server's copy of the file (Gradio names it by its content) and the
    pixel limit, with the warnings their decoding gave: an upload's preview and its explanation, and each slider
    moved after, decoded a TIFF or GIF again each time."""

    def __init__(self) -> None:
        self._decoded: OrderedDict[tuple[str, Optional[int]],
                                   tuple[Image.Image, Optional[Image.Image], tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()  # held while decoding: the preview and the explanation of an upload ask at once

    def load(self, path: "str | os.PathLike[str]", *, max_pixels: Optional[int],
             warn: Callable[[str], None]) -> tuple[Image.Image, Optional[Image.Image]]:
        """:func:`~vitroll.io.images.load_image_with_display` of ``path``, decoded once while it is among the last
        :data:`DECODED_KEPT`; its warnings are told to ``warn`` each time. The pictures are shared: not to be changed.

        Raises
        ------
        ImageReadError
            When ``path`` cannot be read (not kept: asked again, it is read again).
        """
        key = (str(path), max_pixels)
        with self._lock:
            decoded = self._decoded.get(key)
            if decoded is None:
                told: list[str] = []
                decoded = (*load_image_with_display(path, max_pixels=max_pixels, warn=told.append), tuple(told))
                self._decoded[key] = decoded
                while len(self._decoded) > DECODED_KEPT:
                    self._decoded.popitem(last=False)
            self._decoded.move_to_end(key)
        stored, display, told = decoded
        for message in told:
            warn(message)
        return stored, display


WARNINGS_KEPT = 10_000
"""The most warnings :class:`WarningsGiven` remembers having given, over all sessions."""


class WarningsGiven:
    """The warnings about an image that a page has given, by session, so that each is given once a session: a
    session's are forgotten when it ends (its tab closed), and the least recently given beyond :data:`WARNINGS_KEPT`
    (a session whose end Gradio never tells). A set of them grew with every image for the life of the server."""

    def __init__(self) -> None:
        self._given: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()  # the full-size download is answered beside the explanations

    def first_time(self, session: str, image: str, message: str) -> bool:
        """Whether ``message`` about ``image`` (the server's copy) is new to ``session``; remembered from now on."""
        key = (session, image, message)
        with self._lock:
            if key in self._given:
                self._given.move_to_end(key)
                return False
            self._given[key] = None
            while len(self._given) > WARNINGS_KEPT:
                self._given.popitem(last=False)
            return True

    def forget(self, session: str) -> None:
        """Forget the warnings given to ``session``, which has ended."""
        with self._lock:
            for key in [key for key in self._given if key[0] == session]:
                del self._given[key]


def given_the_request(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, its parameter ``request`` typed ``gradio.Request`` where Gradio reads it (it passes an event's
    request to a parameter so typed): the module's annotations are strings, which name no ``gradio`` here."""
    function.__annotations__["request"] = require_gradio().Request
    return function


def preprocessing_here(function: Callable[..., Any], inputs: Sequence["gradio.Component"]) -> Callable[..., Any]:
    """``function`` of the values of ``inputs``, as a function of what the page sends (for an event with
    ``preprocess=False``), which these components themselves turn into values; its first parameter is the event's
    request (typed ``gradio.Request``: :func:`given_the_request`), passed on as Gradio gives it. Gradio's own
    preprocessing uses a session's copy of a component once an event has updated it (an example picked updates the
    image box), built anew from its arguments: without the refusals and the upload's name that :func:`build_app` adds
    to its components."""

    @functools.wraps(function)  # Gradio reads the parameters' names and defaults
    def from_payloads(request: "gradio.Request", *payloads: Any) -> Any:
        return function(request, *(preprocessed(box, payload) for box, payload in zip(inputs, payloads)))

    return from_payloads


def preprocessed(component: "gradio.Component", payload: Any) -> Any:
    """``payload`` (what the page sends, as JSON) as ``component`` gives it to an event's function."""
    model = getattr(component, "data_model", None)
    if payload is not None and model is not None:
        payload = model.model_validate(payload)
    return component.preprocess(payload)


def refusal(message: str) -> "gradio.Error":
    """The page's one-line message for a user's mistake: ``message`` as text (Gradio shows an error's message as HTML,
    and a file may be named ``<img src=x onerror=…>.png``), without a traceback on the server's terminal."""
    return require_gradio().Error(html.escape(message, quote=False), print_exception=False)


def upload_refusal(error: ImageReadError, name: str) -> str:
    """Why an upload cannot be explained, named as the user named it (not by the server's copy of it)."""
    return f"{name}: {error.reason}"


def _refusing_unreadable_uploads(box: "gradio.Image") -> "gradio.Image":
    """``box`` with its uploads that Pillow cannot open refused with :func:`load_image`'s reason; Gradio's own message
    for them is several lines about its event handler, with the server's temporary path. An image it gives is an
    :class:`UploadPath`. (The instance's method, not a subclass: Gradio writes a ``.pyi`` stub beside the module of
    every component subclass.)"""
    preprocess = box.preprocess

    def readable_preprocess(payload: Any) -> Any:
        try:
            with pillow_limit_lifted():  # Gradio opens the upload; its size is load_image's to judge, from max_pixels
                path = preprocess(payload)
        except (OSError, SyntaxError, ValueError):
            try:
                load_image(payload.path)
            except ImageReadError as error:
                raise refusal(upload_refusal(error, payload.orig_name or Path(payload.path).name)) from None
            raise
        return None if path is None else UploadPath(path, payload.orig_name or Path(path).name)

    box.preprocess = readable_preprocess
    return box


def _refusing_values_off_the_menu(widget: "gradio.Dropdown | gradio.Slider") -> "gradio.Dropdown | gradio.Slider":
    """``widget`` with a value it does not offer (sent through the API: a method not in the menu, a slider beyond its
    ends) refused in one line naming the widget and what it offers; Gradio's own refusal names neither, and prints a
    traceback on the server's terminal."""
    gr = require_gradio()
    preprocess = widget.preprocess

    def checked_preprocess(payload: Any) -> Any:
        try:
            value = preprocess(payload)
        except (gr.Error, TypeError, ValueError):
            value = None
        if value is None:  # a menu passes None on as it is
            if isinstance(widget, gr.Slider):
                offered = f"a number from {widget.minimum:g} to {widget.maximum:g}"
            else:
                offered = "one of " + ", ".join(str(value) for _, value in widget.choices)
            raise refusal(f"{widget.label}: {payload!r} is not offered; choose {offered}")
        return value

    widget.preprocess = checked_preprocess
    return widget


def _describe(outline: ModelOutline) -> str:
    if outline.image_text:
        classes = "image–text: its classes are the prompts"
    else:
        classes = (f"{len(outline.class_names)} classes" if outline.class_names
                   else "no classification head, so no methods that explain a class score")
    return f"{outline.layers} layers, {outline.heads} heads, {classes}"


def _device_of(model: nn.Module) -> str:
    parameter = next(model.parameters(), None)
    return "cpu" if parameter is None else str(parameter.device)


def _control_widgets(gr: Any, outline: ModelOutline) -> list:
    """method, head fusion, discard ratio, start layer, layer, head, target class — in that order, those that the
    first method (rollout) ignores greyed out; an image–text model's target classes are its first prompts. A model
    without classes is offered only the methods that need none, and no target-class menu."""
    last = outline.layers - 1
    classes = DEFAULT_PROMPTS if outline.image_text else outline.class_names
    used = {label: label not in ignored_controls("rollout") for label in _WIDGET_ORDER}
    discard = PAGE_CONTROLS["discard_ratio"]
    return [
        gr.Dropdown(offered_methods(outline), value="rollout", label="method"),
        gr.Dropdown(["mean", "max", "min"], value="mean", label="head fusion", interactive=used["head fusion"]),
        gr.Slider(float(discard.minimum), float(discard.maximum), value=0.0, step=float(discard.step),
                  label=discard.label, interactive=used["discard ratio"]),
        gr.Slider(0, last, value=0, step=1, label="start layer", interactive=used["start layer"]),
        gr.Slider(0, last, value=last, step=1, label="layer (per-head grid, single head)"),
        gr.Dropdown([("all heads", ALL_HEADS)] + [(f"head {h}", str(h)) for h in range(outline.heads)],
                    value=ALL_HEADS, label="head", interactive=used["head"]),
        gr.Dropdown(target_choices(classes, image_text=outline.image_text), value=PREDICTED, label="target class",
                    interactive=used["target class"], allow_custom_value=outline.image_text,  # any prompt's index
                    visible=outline.has_classes),
    ]


def _widget_updates(method: str, head: str, *, method_changed: bool) -> list:
    """Updates of the widgets after ``method`` or ``head`` changed, in :data:`_WIDGET_ORDER`: the controls the
    method ignores greyed out (the layer stays: the head grid uses it); a new method's own default discard ratio."""
    gr = require_gradio()
    ignored = set(ignored_controls(method, single_head=head != ALL_HEADS)) - {"layer"}
    updates = {label: gr.update(interactive=label not in ignored) for label in _WIDGET_ORDER}
    discard = method_named(method).options.get("discard_ratio")
    if method_changed and discard is not None:
        updates["discard ratio"] = gr.update(interactive=True, value=discard.default)
    return [updates[label] for label in _WIDGET_ORDER]


_WIDGET_ORDER = ("head fusion", "discard ratio", "start layer", "layer", "head", "target class")


def serve(app: "gradio.Blocks", *, host: str, port: Optional[int], examples: Sequence[Path] = (),
          block: bool = True) -> str:
    """Serve ``app`` at ``host:port`` (``port`` None: Gradio's first free one from 7860), never through Gradio's
    public share link; with ``block``, until Ctrl-C, after one line on stdout with the page's address (Gradio's own
    start-up lines advise ``share=True``, which vitroll does not offer), then closed. Returns the page's local URL.

    Gradio's copies of the uploads and of the files the page serves are kept in :data:`PRIVATE_CACHE` (mode 0700),
    held from :func:`build_app` and removed when ``app.close()`` closes the last page of this process; unless
    ``GRADIO_TEMP_DIR`` was set outside vitroll: then there, and left there."""
    try:
        _, local_url, _ = app.launch(server_name=host, server_port=port, share=False, inbrowser=False, show_error=True,
                                     prevent_thread_lock=True, quiet=True, css=PAGE_CSS, js=PAGE_JS,
                                     allowed_paths=sorted({str(path.parent) for path in examples}))
        if block:
            print(f"vitroll: the explorer is at {local_url} (Ctrl-C stops it)", flush=True)
            app.block_thread()  # returns on Ctrl-C, the server stopped
    finally:
        if block or not app.is_running:  # a failed launch, or served until Ctrl-C
            app.close(verbose=False)
    return local_url


GRADIO_FOLDER_READERS = ("gradio.route_utils", "gradio.routes", "gradio.screen_recording_utils", "gradio.mcp")
"""Gradio's modules that read ``GRADIO_TEMP_DIR`` once, when imported, into their ``DEFAULT_TEMP_DIR``: a launch makes
``vibe_edit_history`` there, and a screen recording's files are written there."""


def point_imported_gradio_at(folder: str) -> None:
    """Each of :data:`GRADIO_FOLDER_READERS` already imported names ``folder`` from now on; one imported later reads
    ``GRADIO_TEMP_DIR`` itself."""
    for name in GRADIO_FOLDER_READERS:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "DEFAULT_TEMP_DIR"):
            module.DEFAULT_TEMP_DIR = folder


class PrivateCache:
    """The folder Gradio keeps its copies of uploads and served files in while this process serves explorers: by
    default ``/tmp/gradio/<hash>/<the user's file name>``, readable by every user of the machine and never removed;
    here a fresh folder only its owner can enter (``tempfile.mkdtemp``: 0700), named to Gradio by ``GRADIO_TEMP_DIR``
    (which it reads again on each request) and removed with everything in it when the last page is closed. A
    ``GRADIO_TEMP_DIR`` set outside vitroll is used as it is and left alone (it may hold other applications' files).
    :func:`build_app` holds it for a page until ``app.close()``, from before it copies the examples; ``with
    PRIVATE_CACHE:`` holds it around more (``vitroll app``: the whole command). Some of Gradio's modules read the
    folder once, at import (:data:`GRADIO_FOLDER_READERS`): imported before (by the caller, or for an earlier page,
    whose folder is gone), they are pointed at the private folder while it is held, and at Gradio's default after.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages = 0
        self._folder: Optional[tempfile.TemporaryDirectory] = None
        self._outside: Optional[str] = None

    @property
    def folder(self) -> Optional[Path]:
        """The private folder while a page is served (None otherwise, or with a ``GRADIO_TEMP_DIR`` of the user's)."""
        return None if self._folder is None else Path(self._folder.name)

    def acquire(self) -> str:
        """The cache folder for one more page: the private one (made for the first page), or the user's own."""
        with self._lock:
            self._pages += 1
            if self._pages == 1:
                self._outside = os.environ.get("GRADIO_TEMP_DIR")
                if self._outside is None:
                    self._folder = tempfile.TemporaryDirectory(prefix="vitroll-explorer-cache-")
                    os.environ["GRADIO_TEMP_DIR"] = self._folder.name
                    point_imported_gradio_at(self._folder.name)
            return self._outside if self._folder is None else self._folder.name

    def release(self) -> None:
        """One page fewer: with the last, the private folder is removed and ``GRADIO_TEMP_DIR`` unset again."""
        with self._lock:
            self._pages -= 1
            if self._pages == 0 and self._folder is not None:
                os.environ.pop("GRADIO_TEMP_DIR", None)
                point_imported_gradio_at(str(Path(tempfile.gettempdir()) / "gradio"))  # as Gradio names it unset
                self._folder.cleanup()
                self._folder = None

    def __enter__(self) -> str:
        return self.acquire()

    def __exit__(self, *exception: object) -> None:
        self.release()


PRIVATE_CACHE = PrivateCache()
"""This process's :class:`PrivateCache`."""
