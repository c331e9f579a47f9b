"""Colour a saliency map and blend it onto an RGB image; side-by-side figures.

Everything is RGB: colormaps come from matplotlib (RGB), never from OpenCV's BGR ``applyColorMap``.
"""

from __future__ import annotations

import numbers
import os
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Optional

import numpy as np

from vitroll.colormaps import named_colormap
from vitroll.errors import InputTypeError, InputValueError, OptionValueError, options_by_keyword
from vitroll.io.names import readable
from vitroll.maps import Interpolation, as_map, held_float, normalize, scaled_into_float32, to_original, upsample
from vitroll.preprocess import CropGeometry

if TYPE_CHECKING:
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure


def lookup_table(cmap: "str | Colormap") -> np.ndarray:
    """The 256 colours (256, 3) RGB uint8 of a matplotlib colormap, given by name or as a ``Colormap``.

    Raises
    ------
    ValueError
        For a name matplotlib does not know, with the closest names it does.
    TypeError
        For anything that is neither a name nor a ``Colormap``.
    """
    from matplotlib.colors import Colormap

    if isinstance(cmap, Colormap):
        return _table(cmap)
    if not isinstance(cmap, str):
        raise InputTypeError(f"cmap must be a matplotlib colormap name or a matplotlib.colors.Colormap; got "
                             f"{type(cmap).__name__}")
    return _named_table(cmap)


@lru_cache(maxsize=32)
def _named_table(cmap: str) -> np.ndarray:
    return _table(named_colormap(cmap))


def _table(colormap: "Colormap") -> np.ndarray:
    return (colormap(np.linspace(0.0, 1.0, 256))[:, :3] * 255.0 + 0.5).astype(np.uint8)


def colorize(values: np.ndarray, *, cmap: "str | Colormap" = "jet") -> np.ndarray:
    """Map values in [0, 1] (H, W) (ndarray or tensor) to RGB uint8 (H, W, 3) with a matplotlib colormap (name or
    ``Colormap``); NaN → black. Any other shape is a ValueError (a VitrollError too).

    Parameters
    ----------
    values : ndarray or torch.Tensor, shape (H, W)
        Values in [0, 1] (below 0 take the colormap's first colour, above 1 its last); NaN for no colour.
    cmap : str or matplotlib.colors.Colormap
        A matplotlib colormap, or its name (``"jet"``, ``"viridis"``, …).

    Returns
    -------
    ndarray, uint8, shape (H, W, 3)
        RGB: each value's colour, the nearest of the colormap's 256; black where NaN.
    """
    import cv2

    values = as_map(values, "values")
    index = _table_index(values)
    # cv2.LUT on the index repeated per channel: a fancy-indexed table[index] took 1 s on a 6000×4000 map
    colors = cv2.LUT(cv2.merge([index] * 3), lookup_table(cmap).reshape(256, 1, 3))
    return cv2.copyTo(colors, _mask(np.isfinite(values)), dst=np.zeros_like(colors))


def _table_index(values: np.ndarray) -> np.ndarray:
    """Row of the 256-colour table (H, W) uint8 for each value in [0, 1] (H, W) float32: the nearest of the 256 steps;
    NaN → 0."""
    scaled = np.multiply(values, np.float32(255.0))
    scaled += np.float32(0.5)
    np.fmax(scaled, 0.0, out=scaled)  # fmax, not clip: NaN becomes 0 here (np.nan_to_num took 10× longer)
    np.fmin(scaled, 255.0, out=scaled)
    return scaled.astype(np.uint8)


def _mask(where: np.ndarray) -> np.ndarray:
    """A boolean array (H, W) as the uint8 mask OpenCV takes."""
    return np.ascontiguousarray(where, dtype=bool).view(np.uint8)


def blend(image: np.ndarray, colors: np.ndarray, alpha: float, where: Optional[np.ndarray] = None) -> np.ndarray:
    """``(1 − α)·image + α·colors`` in uint8 (rounded to nearest, ties to even), only where ``where`` (H, W) is True
    (everywhere if None)."""
    import cv2

    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise InputTypeError(f"alpha must be a number in [0, 1]; got {type(alpha).__name__} {alpha!r}")
    if not 0.0 <= alpha <= 1.0:
        raise OptionValueError(f"alpha must be in [0, 1]; got {alpha}")
    # OpenCV's saturating uint8 arithmetic: 30× faster than NumPy's float32 pass on a 6000×4000 image (0.1 s vs 3 s)
    out = cv2.addWeighted(image, 1.0 - alpha, colors, alpha, 0.0)
    if where is not None:
        cv2.copyTo(image, _mask(~np.asarray(where, dtype=bool)), dst=out)  # np.copyto with where: 0.5 s
    return out


def rgb_uint8(image: np.ndarray) -> np.ndarray:
    """``image`` as an array, checked to be RGB uint8 (H, W, 3) with H, W ≥ 1.

    Raises
    ------
    InputValueError
        Naming the dtype and shape given and, for the images people hold (a grey or RGBA PIL image or array, floats
        in [0, 1], channels first), the conversion to RGB uint8.
    """
    given = image
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or 0 in image.shape:
        advice = _rgb_advice(given, image)
        raise InputValueError(f"image must be RGB uint8 of shape (H, W, 3), H and W ≥ 1; "
                              f"got {image.dtype} {image.shape}{f': {advice}' if advice else ''}")
    return image


def _rgb_advice(given: object, image: np.ndarray) -> str:
    """How to make ``image`` (``given`` as an array) RGB uint8 (H, W, 3), or "" when no one conversion fits."""
    if hasattr(given, "convert") and hasattr(given, "mode"):
        return "image.convert('RGB') converts a PIL image"
    if isinstance(given, (str, os.PathLike)):
        return "np.asarray(vitroll.load_image(path)) reads an image file"
    if image.ndim == 3 and image.shape[0] in (1, 3, 4) and image.shape[2] not in (1, 3, 4):
        return "image.transpose(1, 2, 0) puts the channels last"
    if image.dtype.kind == "f" and image.ndim == 3 and image.shape[2] == 3:
        return "(image * 255).round().astype(np.uint8) converts values in [0, 1]"
    if image.ndim == 2 and image.dtype == np.uint8:
        return "np.stack([image] * 3, axis=-1) makes a grey image RGB"
    if image.ndim == 3 and image.shape[2] == 4:
        return "image[..., :3] drops the alpha"
    return ""


@options_by_keyword
def overlay(
    image: np.ndarray,
    heatmap: "np.ndarray | object",
    *,
    cmap: "str | Colormap" = "jet",
    alpha: float = 0.5,
    interpolation: Interpolation = "bilinear",
    normalization: Literal["minmax", "percentile"] = "minmax",
    padded_hw: tuple[int, int] | None = None,
    geometry: Optional[CropGeometry] = None,
) -> np.ndarray:
    """Blend a saliency map onto an RGB image.

    A method's grid map lies on the model's input, which is a centre crop of the image for most models: give its
    ``geometry`` (``Preprocessing.from_model(model).geometry(image.shape[:2])``) to put it there. Without one, a grid
    map is stretched over the whole image, which misplaces it where the model cropped; a ``UserWarning`` says so when
    the grid's aspect ratio differs from the image's by more than 10 %.

    Parameters
    ----------
    image : ndarray, uint8, shape (H, W, 3)
        RGB image.
    heatmap : ndarray or Tensor, shape (h, w) or (H, W)
        With ``geometry``: the grid map (h, w), placed on the pixels the model saw
        (:func:`vitroll.maps.to_original`), the rest of the image left uncoloured. Without: a grid map is stretched
        over the whole image; an image-sized map (e.g. from :func:`vitroll.maps.to_original`) is used as is, and its
        NaN pixels are left uncoloured.
        Values +inf and −inf take the colours of the largest and smallest finite values; finite values of any
        magnitude (float64 up to ±1.8e308, or down to 1e-300) are coloured without overflow or flushing to 0.
    cmap : str or matplotlib.colors.Colormap
        Any matplotlib colormap, by name or as an object.
    alpha : float in [0, 1]
        Weight of the colour layer.
    interpolation : {"bilinear", "bicubic", "nearest"}
        How a grid map is stretched over the image.
    normalization : {"minmax", "percentile"}
        How the map is scaled to the colormap's range (:func:`vitroll.maps.normalize`).
    padded_hw : (int, int), optional
        For a grid map of a model that pads its input up to whole patches (timm's ``dynamic_img_pad``) and an image
        of its input size: the padded input (H', W') ≥ (H, W) the grid covers, ``geometry.padded_hw``
        (:func:`vitroll.maps.upsample`); None: the grid covers the image. An image-sized map is used as is.
    geometry : CropGeometry, optional
        How the model's preprocessing resized and cropped this image (``Preprocessing.from_model(model)`` gives it
        with the tensor, or ``.geometry((H, W))`` alone, without preprocessing): the grid map is put back through it.
        It holds ``padded_hw`` itself.

    Returns
    -------
    ndarray, uint8, shape (H, W, 3), RGB.

    Raises
    ------
    VitrollError, also a ValueError
        For an image that is not RGB uint8 (H, W, 3), a heatmap that is not 2-D or holds no real numbers, an
        ``alpha`` outside [0, 1], an unknown colormap, interpolation or normalization, a ``padded_hw`` smaller than
        the image, a ``geometry`` of another image size than the image's, or given with ``padded_hw``.
    VitrollError, also a TypeError
        For an ``alpha`` or ``cmap`` of another type, a ``geometry`` that is not a CropGeometry.
    """
    image = rgb_uint8(image)
    saliency = as_map(heatmap, "heatmap", dtype=held_float(heatmap))
    if geometry is not None:
        saliency = _placed(saliency, image.shape[:2], geometry, interpolation, padded_hw)
    elif saliency.shape != image.shape[:2]:  # a grid: into float32's range before interpolation adds and overshoots
        if padded_hw is None:
            _warn_if_stretched(saliency.shape, image.shape[:2])
        saliency = upsample(_finite_range(scaled_into_float32(saliency)), image.shape[:2], interpolation=interpolation,
                            padded_hw=padded_hw)
    values = normalize(saliency, mode=normalization)
    return blend(image, colorize(values, cmap=cmap), alpha, where=np.isfinite(values))


STRETCH_TOLERANCE = 1.1
"""How far (as a ratio) a grid map's aspect ratio may differ from its image's before :func:`overlay`, stretching it
without a geometry, warns: a grid a little off the image's shape (224 × 220 pixels under 14 × 14 patches) is not
worth a word, a square grid over a 4:3 photo (its centre crop's map spread over the sides it cut off) is."""


def _placed(grid_map: np.ndarray, image_hw: tuple[int, int], geometry: CropGeometry, interpolation: Interpolation,
            padded_hw: tuple[int, int] | None) -> np.ndarray:
    """``grid_map`` (h, w) on the image's pixels (H, W) through ``geometry`` (NaN where the model saw nothing)."""
    if padded_hw is not None:
        raise InputValueError("give geometry or padded_hw, not both: the geometry holds its padded_hw")
    placed = to_original(_finite_range(scaled_into_float32(grid_map)), geometry, interpolation=interpolation)
    covered_hw = geometry.padded_hw or geometry.input_hw
    if grid_map.shape[0] > covered_hw[0] or grid_map.shape[1] > covered_hw[1]:  # a patch is a pixel at least
        already = ", already in the image's pixels (as to_original gives it)" if grid_map.shape == image_hw else ""
        raise InputValueError(
            f"heatmap is {grid_map.shape[0]}×{grid_map.shape[1]}{already}: larger than the model's input of "
            f"{covered_hw[0]}×{covered_hw[1]} pixels, it is no patch grid, which geometry places; give the grid map "
            "(h, w) with geometry, or this map without geometry")
    if placed.shape != tuple(image_hw):
        raise InputValueError(f"geometry is of an image of {placed.shape[0]}×{placed.shape[1]} pixels (H×W), this "
                              f"image is {image_hw[0]}×{image_hw[1]}: take the geometry of this image "
                              "(Preprocessing.from_model(model).geometry(image.shape[:2]))")
    return placed


def _warn_if_stretched(grid_hw: tuple[int, ...], image_hw: tuple[int, ...]) -> None:
    """A ``UserWarning`` when a grid map of ``grid_hw`` stretched over an image of ``image_hw`` would be distorted by
    more than :data:`STRETCH_TOLERANCE`: the map of a centre crop, spread over what the crop cut off."""
    ratio = (image_hw[0] / image_hw[1]) / (grid_hw[0] / grid_hw[1])
    if max(ratio, 1 / ratio) <= STRETCH_TOLERANCE:
        return
    warnings.warn(f"overlay: a grid map of {grid_hw[0]}×{grid_hw[1]} patches is stretched over an image of "
                  f"{image_hw[0]}×{image_hw[1]} pixels (H×W), another shape: where the model saw a centre crop, the "
                  "map lands off the pixels it is of. Give geometry=Preprocessing.from_model(model).geometry("
                  "image.shape[:2]) to put it where the model looked (or a map in the image's pixels, "
                  "vitroll.to_original(grid_map, geometry))", UserWarning,
                  stacklevel=4)  # past this function, overlay and its options_by_keyword check: the caller's line


def _finite_range(saliency: np.ndarray) -> np.ndarray:
    """``saliency`` (h, w) with ±inf replaced by its largest and smallest finite values (NaN kept), as
    :func:`~vitroll.maps.normalize` colours them: interpolated, an infinite cell made its neighbours NaN (∞·0). Where
    the finite values are all one, which normalize makes 0 and +inf 1, the map is those 0 and 1."""
    infinite = np.isinf(saliency)
    finite = saliency[np.isfinite(saliency)]
    if not infinite.any() or finite.size == 0:
        return saliency
    if finite.max() == finite.min():
        return np.where(np.isnan(saliency), saliency, saliency == np.inf).astype(saliency.dtype)
    return np.where(infinite, np.where(saliency > 0, finite.max(), finite.min()), saliency).astype(saliency.dtype)


def outline_boxes(
    image: np.ndarray, boxes: "list[tuple[int, int, int, int]]", *, color: tuple[int, int, int] = (255, 255, 255),
    thickness: int = 2,
) -> np.ndarray:
    """A copy of an RGB image (H, W, 3) with each (left, top, right, bottom) box outlined (right/bottom exclusive).

    Parameters
    ----------
    image : ndarray, uint8, shape (H, W, 3)
        The RGB picture to draw on (left as it is).
    boxes : list of (int, int, int, int)
        (left, top, right, bottom) in the image's pixels, right/bottom exclusive (:attr:`KeyPatch.box`).
    color : (int, int, int)
        The outlines' RGB colour.
    thickness : int
        The outlines' width in pixels, ≥ 1.

    Returns
    -------
    ndarray, uint8, shape (H, W, 3)
        A copy of ``image`` with the outlines drawn.

    Raises
    ------
    InputValueError
        For an image that is not RGB uint8 (H, W, 3) (as :func:`overlay`), a box that is not four finite numbers,
        naming it, a ``color`` that is not three numbers in [0, 255] or a ``thickness`` below 1.
    InputTypeError
        For ``boxes`` that are not a list (or tuple, array) of boxes, or a ``thickness`` that is not an integer.
    """
    import cv2

    outlined = rgb_uint8(image).copy()
    if isinstance(boxes, (str, bytes)) or not hasattr(boxes, "__iter__"):
        raise InputTypeError(f"boxes must be a list of (left, top, right, bottom) boxes; got {type(boxes).__name__}")
    if isinstance(thickness, bool) or not isinstance(thickness, numbers.Integral):
        raise InputTypeError(f"thickness must be an integer ≥ 1; got {type(thickness).__name__} {thickness!r}")
    if thickness < 1:
        raise OptionValueError(f"thickness must be an integer ≥ 1; got {thickness}")
    color = _rgb_color(color)
    height, width = outlined.shape[:2]
    # coordinates clipped to just beyond the image: a line out there draws nothing either way, and OpenCV takes int32
    reach = np.array([width, height, width, height]) + thickness + 1
    for index, box in enumerate(boxes):
        left, top, right, bottom = (int(value) for value in np.clip(_box(index, box), -reach, reach))
        cv2.rectangle(outlined, (left, top), (right - 1, bottom - 1), color, thickness)
    return outlined


def _box(index: int, box: object) -> np.ndarray:
    """``boxes[index]`` as four numbers (4,) float64.

    Raises
    ------
    InputValueError
        For anything but four finite real numbers (a tuple, list, array or tensor), naming it.
    """
    try:
        values = np.asarray(box.detach().cpu() if hasattr(box, "detach") else box)
    except ValueError:  # a ragged sequence: (0, 0, 5, (1, 2))
        values = np.empty(0)
    if values.shape != (4,) or values.dtype.kind not in "biuf" or not np.isfinite(values).all():
        advice = (": [patch.box for patch in patches] gives the KeyPatches' boxes" if hasattr(box, "box") else
                  ": one box goes in a list, [box]" if isinstance(box, numbers.Number) else "")
        raise InputValueError(f"boxes[{index}] must be (left, top, right, bottom), four finite numbers; got "
                              f"{box!r}{advice}")
    return values.astype(np.float64)


def _rgb_color(color: object) -> tuple[int, int, int]:
    """``color`` as three integers in [0, 255] (an RGB colour for OpenCV).

    Raises
    ------
    InputValueError
        For anything else, naming it.
    """
    try:
        values = np.asarray(color)
    except ValueError:
        values = np.empty(0)
    if values.shape != (3,) or values.dtype.kind not in "biuf" or not ((values >= 0) & (values <= 255)).all():
        raise InputValueError(f"color must be (red, green, blue), three numbers in [0, 255]; got {color!r}")
    return tuple(int(value) for value in values)


LITERAL = {"parse_math": False, "usetex": False}
"""Text properties of every title vitroll draws from a file, class or model name: drawn as written, so a ``$`` is not
mathtext (``a$\\frac$b.png`` raised a parse error, ``$5 and $x`` came out in italics) and ``_ % & \\`` never go to
TeX."""

TITLE_LINES = 3
"""The most lines :func:`fit_text` gives a title: a longer one would squeeze the pictures under it."""

FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR", "Source Han Sans",
                  "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "Noto Sans", "Noto Sans Arabic",
                  "Noto Sans Hebrew", "Noto Sans Devanagari", "Noto Sans Thai")
"""Fonts that draw what matplotlib's own font (DejaVu Sans) lacks — Chinese, Japanese, Korean, Arabic… names —, in
the order they are tried, where installed (Debian: ``fonts-noto-cjk``, ``fonts-noto-core``)."""
_GLYPH_MISSING = r"Glyph \d+ .* missing from font"


@lru_cache(maxsize=None)
def _installed_fallback_fonts() -> tuple[str, ...]:
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    return tuple(name for name in FALLBACK_FONTS if name in installed)


def use_fallback_fonts() -> tuple[str, ...]:
    """Have matplotlib draw a character its font lacks with the first installed font of :data:`FALLBACK_FONTS` that
    has it (matplotlib's font family list), unless the user chose their own ``font.family``; a character no font has
    is drawn as a box without matplotlib's two-line warning per figure (titles fitted with :func:`fit_text` spell it as
    its escape instead, :func:`drawable`). Returns the fallback fonts in use."""
    import matplotlib

    warnings.filterwarnings("ignore", message=_GLYPH_MISSING, category=UserWarning)
    fallbacks = _installed_fallback_fonts()
    family = list(matplotlib.rcParams["font.family"])
    if fallbacks and family == ["sans-serif"]:
        matplotlib.rcParams["font.family"] = [*family, *fallbacks]
    return fallbacks


@lru_cache(maxsize=None)
def _characters_of(path: str) -> frozenset[int]:
    """The code points font file ``path`` has glyphs for."""
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(path).get_charmap())


def drawable(text: str) -> str:
    """``text`` with each character that none of the fonts matplotlib draws a title in has (its ``font.family``,
    with the installed :data:`FALLBACK_FONTS`: :func:`use_fallback_fonts`) spelt as its Python escape, ``\\u732b``
    for 猫 where no CJK font is installed: matplotlib drew it as an empty box, and a name in such characters as a row
    of boxes no one can tell from another. The names beside the pictures (the gallery's page, ``manifest.csv``) keep
    the characters, which a browser draws with the system's fonts."""
    from matplotlib.font_manager import FontProperties, fontManager

    use_fallback_fonts()
    # the fonts, in order, that matplotlib itself falls back on for a text of the default properties
    fonts = [_characters_of(str(path)) for path in fontManager._find_fonts_by_props(FontProperties())]
    return "".join(character if character.isascii() or any(ord(character) in font for font in fonts)
                   else ascii(character)[1:-1] for character in text)


def fit_text(text: str, width: float, fontsize: float, *, lines: int = TITLE_LINES) -> str:
    """``text`` in at most ``lines`` lines, each at most ``width`` inches wide at ``fontsize`` points in matplotlib's
    font, as measured by matplotlib: broken at spaces where it can and inside a word where it must (a long name
    without spaces would run across the next panels); line breaks already in ``text`` are kept; what does not fit
    is cut, the last line ending in "…". The bytes of a file name that is not UTF-8, which matplotlib cannot draw,
    are spelt ``\\xe9`` (:func:`~vitroll.io.names.readable`), a character no font here has ``\\u732b``
    (:func:`drawable`)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    use_fallback_fonts()  # measured in the fonts it is drawn in
    measure, font, points = TextToPath(), FontProperties(size=fontsize), width * 72.0

    def fits(line: str) -> bool:
        with warnings.catch_warnings():  # a glyph the font lacks is warned about once, when it is drawn
            warnings.simplefilter("ignore")
            return measure.get_text_width_height_descent(line, font, ismath=False)[0] <= points

    def longest_fitting(line: str) -> int:
        low, high = 1, len(line)  # at least one character per line, however narrow the width
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(line[:middle]) else (low, middle - 1)
        return low

    fitted: list[str] = []
    for paragraph in drawable(readable(text)).split("\n"):
        rest = " ".join(paragraph.split())
        while len(fitted) <= lines:
            if fits(rest):
                fitted.append(rest)
                break
            cut = longest_fitting(rest)
            space = rest.rfind(" ", 0, cut + 1)
            cut = space if space > 0 else cut
            fitted.append(rest[:cut].rstrip())
            rest = rest[cut:].lstrip()
    if len(fitted) <= lines:
        return "\n".join(fitted)
    last = fitted[lines - 1]
    while last and not fits(last + "…"):
        last = last[:-1]
    return "\n".join([*fitted[: lines - 1], last.rstrip() + "…"])


FIGURE_WIDTH = 12.0
"""Inches across :func:`figure`."""
SUPTITLE_SIZE = 14.0
"""Points of a figure's title."""
TITLE_SHARE = 0.95
"""Of its figure or panel, what a title may fill: matplotlib's margins take the rest."""


SHOWN_SIDE = 1024
"""Longest side, in pixels, of a picture handed to matplotlib: a panel is at most a few hundred pixels wide, and
matplotlib resamples a 6000×4000 image in float64 (20 s for one figure); larger pictures are shrunk first."""


def shrunk(picture: np.ndarray) -> np.ndarray:
    """``picture`` (H, W) or (H, W, 3) area-averaged to at most :data:`SHOWN_SIDE` pixels along its longest side (as
    it is when already that small); NaN spreads only to the pixels next to it."""
    import cv2

    scale = SHOWN_SIDE / max(picture.shape[:2])
    if scale >= 1.0:
        return picture
    height, width = (max(1, round(side * scale)) for side in picture.shape[:2])
    return cv2.resize(picture, (width, height), interpolation=cv2.INTER_AREA)


def figure(image: np.ndarray, saliency: np.ndarray, overlaid: np.ndarray, *, title: str = "",
           cmap: "str | Colormap" = "jet") -> "Figure":
    """A matplotlib Figure: image | heatmap with colorbar | overlay. ``saliency`` is image-sized (H, W).

    Parameters
    ----------
    image : ndarray, uint8, shape (H, W, 3)
        The RGB picture.
    saliency : ndarray or torch.Tensor, shape (H, W)
        Its map in the image's pixels (:func:`~vitroll.to_original`), shown normalised to [0, 1].
    overlaid : ndarray, uint8, shape (H, W, 3)
        The map blended over the picture (:func:`overlay`).
    title : str
        A title above the three panels; none when empty.
    cmap : str or matplotlib.colors.Colormap
        The heatmap's colormap.

    Returns
    -------
    matplotlib.figure.Figure
        Three panels side by side (image, heatmap with its colorbar, overlay), 12 inches wide; not shown, not saved.

    Raises
    ------
    InputValueError
        When ``saliency`` (H, W) or ``overlaid`` (H, W, 3) is not the size of ``image`` (H, W, 3): side by side, the
        panels would show different pixels at the same place.
    """
    from matplotlib.figure import Figure

    image_hw = tuple(np.shape(image)[:2])
    for name, picture, shape in (("saliency", saliency, image_hw), ("overlaid", overlaid, (*image_hw, 3))):
        if tuple(np.shape(picture)) != shape:
            advice = (": to_original(grid_map, geometry) puts a grid map on its image"
                      if name == "saliency" and np.ndim(picture) == 2 else "")
            raise InputValueError(f"{name} must have shape {shape} for an image of shape {np.shape(image)}; got "
                                  f"{tuple(np.shape(picture))}{advice}")
    fig = Figure(figsize=(FIGURE_WIDTH, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    axes[0].imshow(shrunk(image))
    axes[0].set_title("image")
    shown = axes[1].imshow(shrunk(normalize(saliency)), cmap=cmap, vmin=0.0, vmax=1.0)
    axes[1].set_title("saliency (normalised)")
    fig.colorbar(shown, ax=axes[1], fraction=0.046, pad=0.04)
    axes[2].imshow(shrunk(overlaid))
    axes[2].set_title("overlay")
    for ax in axes:
        ax.set_axis_off()
    if title:
        fig.suptitle(fit_text(title, FIGURE_WIDTH * TITLE_SHARE, SUPTITLE_SIZE), fontsize=SUPTITLE_SIZE, **LITERAL)
    return fig


GRID_COLUMNS = 8
"""Panels per row of :func:`overlay_grid`: many texts wrap into rows rather than make one picture too wide to view."""


GRID_PANEL = 3.2
"""Inches across one panel of :func:`overlay_grid`."""
GRID_TITLE_SIZE = 10.0
"""Points of a panel's title in :func:`overlay_grid`."""


def overlay_grid(image: np.ndarray, overlays: "list[np.ndarray]", titles: "list[str]", *, title: str = "",
                 columns: int = GRID_COLUMNS, image_title: str = "image"):
    """A matplotlib Figure: the image under ``image_title``, then each overlay (H, W, 3) under its title (one map per
    text or word), in rows of at most ``columns`` panels."""
    from matplotlib.figure import Figure

    height, width = image.shape[:2]
    panel = GRID_PANEL
    count = 1 + len(overlays)
    across = min(count, columns)
    rows = -(-count // across)
    fig = Figure(figsize=(panel * across, (panel * height / width + 0.8) * rows), layout="constrained")
    axes = fig.subplots(rows, across, squeeze=False).ravel()
    for ax in axes:
        ax.set_axis_off()
    for ax, picture, caption in zip(axes, [image, *overlays], [image_title, *titles]):
        ax.imshow(picture)
        ax.set_title(fit_text(caption, panel * TITLE_SHARE, GRID_TITLE_SIZE), fontsize=GRID_TITLE_SIZE, **LITERAL)
    if title:
        fig.suptitle(fit_text(title, panel * across * TITLE_SHARE, SUPTITLE_SIZE), fontsize=SUPTITLE_SIZE, **LITERAL)
    return fig
