"""Photos that embed an ICC colour profile: the model reads the stored values, the overlay shows them in sRGB."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageCms

from icc_profiles import cmyk_profile, display_p3_profile, linear_grey_profile, p3_to_srgb, printed_srgb, srgb_encode
from vitroll.cli import main
from vitroll.errors import InputValueError
from vitroll.io.images import load_image_with_display
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.stream import decoded_batches, read_image
from vitroll.preprocess import Preprocessing

ROOT = Path(__file__).resolve().parents[1]
P3_COLOUR = (200, 120, 80)
"""Inside both gamuts: Display P3 (200, 120, 80) is sRGB (213, 115, 70)."""


def _picture(path, colours, **save):
    pixels = np.array([colours], dtype=np.uint8)
    Image.fromarray(pixels).save(path, **save)
    return pixels


def test_a_display_p3_photo_is_shown_in_srgb_and_read_as_stored(tmp_path):
    path = tmp_path / "p3.png"
    stored = _picture(path, [P3_COLOUR, (255, 0, 0), (0, 0, 0), (255, 255, 255)], icc_profile=display_p3_profile())
    image, display = load_image_with_display(path)
    assert np.array_equal(np.asarray(image), stored)
    shown = np.asarray(display).astype(float)
    assert np.abs(shown[0, 0] - p3_to_srgb(P3_COLOUR)).max() <= 1
    assert np.abs(shown[0, 0] - (213, 115, 70)).max() <= 1
    assert shown[0, 1].tolist() == [255, 0, 0]  # P3's red lies outside sRGB: clipped to sRGB's red
    assert shown[0, 2:].tolist() == [[0, 0, 0], [255, 255, 255]]


@pytest.mark.parametrize("profile", [None, ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()],
                         ids=["untagged", "srgb"])
def test_an_untagged_or_srgb_photo_is_shown_bit_for_bit_as_stored(tmp_path, profile):
    path = tmp_path / "photo.png"
    colours = np.random.default_rng(0).integers(0, 256, (64, 3)).tolist()
    stored = _picture(path, [tuple(c) for c in colours], **({"icc_profile": profile} if profile else {}))
    image, display = load_image_with_display(path)
    assert display is None and np.array_equal(np.asarray(image), stored)
    assert np.array_equal(read_image(path)[0].shown, stored)


@pytest.mark.parametrize("profile", [b"not a profile at all", display_p3_profile()[:200]], ids=["garbage", "truncated"])
def test_a_broken_profile_gives_one_warning_and_the_stored_pixels(tmp_path, capsys, profile):
    path = tmp_path / "broken.png"
    stored = _picture(path, [P3_COLOUR], icc_profile=profile)
    image, display = load_image_with_display(path)
    assert display is None and np.array_equal(np.asarray(image), stored)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vitroll: warning: broken.png: its embedded ICC colour profile "
                                                   "cannot be used (")


def test_an_exif_rotated_p3_jpeg_is_turned_upright_and_converted(tmp_path):
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to show
    Image.new("RGB", (32, 16), P3_COLOUR).save(path, icc_profile=display_p3_profile(), exif=exif, quality=100)
    image, display = load_image_with_display(path)
    assert image.size == display.size == (16, 32)
    assert np.abs(np.asarray(display)[8, 8] - p3_to_srgb(P3_COLOUR)).max() <= 2  # JPEG rounding on top


def test_the_model_gets_the_stored_values_and_the_overlay_the_srgb_ones(tmp_path, capsys):
    tagged, untagged = tmp_path / "tagged.png", tmp_path / "untagged.png"
    _picture(tagged, [P3_COLOUR] * 40, icc_profile=display_p3_profile())
    _picture(untagged, [P3_COLOUR] * 40)
    preprocessing = Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3)
    (batch,) = decoded_batches([tagged, untagged], read_image, preprocessing, batch_size=2)
    assert torch.equal(batch.tensor[0], batch.tensor[1])
    tagged_shown, untagged_shown = (record.image[0, 0].tolist() for record in batch.decoded)
    assert untagged_shown == list(P3_COLOUR) and np.abs(np.subtract(tagged_shown, (213, 115, 70))).max() <= 1

    out = tmp_path / "out"
    assert main(["overlay", str(tagged), "--model", "vit_tiny_patch16_224", "--out", str(out), "--alpha", "0",
                 "--device", "cpu"]) == 0
    written = np.asarray(Image.open(out / "tagged_rollout.png"))
    assert np.array_equal(written, np.broadcast_to(tagged_shown, written.shape))


def test_a_colour_dicom_with_an_icc_profile_is_drawn_in_srgb_and_read_as_stored(tmp_path, capsys):
    from dicom_factory import write_dicom
    from vitroll.audit.pipeline import AuditInput, audit_frames
    from vitroll.audit.records import AuditOptions

    pixels = np.broadcast_to(np.array(P3_COLOUR, dtype=np.uint8), (8, 8, 3))
    write_dicom(tmp_path / "p3.dcm", pixels, photometric="RGB", ICCProfile=display_p3_profile())
    write_dicom(tmp_path / "broken.dcm", pixels, photometric="RGB", number=2, ICCProfile=b"broken profile")
    options = AuditOptions(salt="s")
    (tagged,) = audit_frames(AuditInput(tmp_path / "p3.dcm", 1, "p3.dcm"), options)
    assert np.array_equal(tagged.image, pixels)
    assert np.abs(tagged.shown[0, 0].astype(float) - p3_to_srgb(P3_COLOUR)).max() <= 1
    (broken,) = audit_frames(AuditInput(tmp_path / "broken.dcm", 2, "broken.dcm"), options)
    assert broken.display is None
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"vitroll: warning: {broken.info.row.case}: its embedded ICC colour profile")
    assert "broken" not in warning.split(":")[2]  # the case name, never the file's (it may name the patient)


def test_the_explorer_draws_on_the_srgb_picture_and_explains_the_stored_one():
    from vitroll.pipelines.explorer import ExplorerControls, explore
    from vitroll.testbed.model import load_testbed_model

    model = load_testbed_model()
    stored = np.asarray(Image.open(ROOT / "sample_images" / "shapes_cross.png").convert("RGB"))
    display = np.ascontiguousarray(255 - stored)
    settings = ExplainSettings(alpha=0.0)
    plain = explore(model, stored, ExplorerControls(), settings=settings)
    shown = explore(model, stored, ExplorerControls(), settings=settings, display=display)
    assert np.array_equal(plain.grid_map, shown.grid_map) and plain.top == shown.top
    assert np.array_equal(plain.overlay, stored) and np.array_equal(shown.overlay, display)
    with pytest.raises(InputValueError, match=r"^display has shape \(2, 2, 3\)"):
        explore(model, stored, ExplorerControls(), display=display[:2, :2])


def test_written_overlays_and_figures_are_tagged_srgb(tmp_path):
    assert main(["overlay", str(ROOT / "sample_images" / "shapes_cross.png"), "--model", "vit_tiny_patch16_224",
                 "--out", str(tmp_path), "--figure", "--device", "cpu"]) == 0
    for name in ("shapes_cross_rollout.png", "shapes_cross_rollout_figure.png"):
        with Image.open(tmp_path / name) as written:
            written.load()  # the CRCs are checked
            assert written.info.get("srgb") == 0, name


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_the_audit_draws_a_display_p3_photo_in_srgb_and_reads_it_as_stored(tmp_path, suffix):
    from vitroll.audit.pipeline import AuditInput, audit_frames
    from vitroll.audit.records import AuditOptions

    path = tmp_path / f"p3{suffix}"
    Image.new("RGB", (16, 8), P3_COLOUR).save(path, icc_profile=display_p3_profile(), quality=100)
    stored, display = (np.asarray(picture) for picture in load_image_with_display(path))
    (frame,) = audit_frames(AuditInput(path, 1, path.name), AuditOptions(salt="s", keep_burned_in_text=True))
    assert np.array_equal(frame.image, stored)
    assert np.array_equal(frame.shown, display)
    assert np.abs(frame.shown[4, 8].astype(float) - p3_to_srgb(P3_COLOUR)).max() <= 2  # JPEG rounding on top


def test_a_multi_frame_dicom_builds_its_colour_transform_once(tmp_path, monkeypatch):
    from dicom_factory import write_dicom
    from vitroll.audit.pipeline import AuditInput, audit_frames
    from vitroll.audit.records import AuditOptions

    built = []
    build = ImageCms.buildTransform
    monkeypatch.setattr(ImageCms, "buildTransform", lambda *args, **kwargs: built.append(1) or build(*args, **kwargs))
    pixels = np.broadcast_to(np.array(P3_COLOUR, dtype=np.uint8), (5, 8, 8, 3))
    profile = display_p3_profile("Display P3 (built once)")  # bytes no other test converted with
    write_dicom(tmp_path / "cine.dcm", pixels, photometric="RGB", ICCProfile=profile)
    frames = audit_frames(AuditInput(tmp_path / "cine.dcm", 1, "cine.dcm"),
                          AuditOptions(salt="s", keep_burned_in_text=True))
    assert len(frames) == 5 and len(built) == 1
    for frame in frames:
        assert np.abs(frame.shown[0, 0].astype(float) - p3_to_srgb(P3_COLOUR)).max() <= 1


def test_evaluate_draws_its_examples_in_srgb_and_measures_the_stored_pixels(tmp_path):
    from vitroll.pipelines.evaluate import Evaluation, examples_figure, folder_images

    stored = np.full((8, 8, 3), P3_COLOUR, np.uint8)
    Image.fromarray(stored).save(tmp_path / "p3.png", icc_profile=display_p3_profile())
    mask = np.zeros((8, 8), np.uint8)
    mask[6:, 6:] = 255
    Image.fromarray(mask).save(tmp_path / "p3_mask.png")
    (image,) = folder_images(tmp_path)
    assert np.array_equal(image.image, stored)
    evaluation = Evaluation(examples={"rollout": [np.zeros((8, 8), np.float32)]})
    for axis in examples_figure(evaluation, [image], cmap="gray").axes:  # left: the image; right: a black map on it
        drawn = np.asarray(axis.get_images()[0].get_array())
        assert np.abs(drawn[1, 1].astype(float) - p3_to_srgb(P3_COLOUR) / (1 if axis.get_title() == "image + mask"
                                                                           else 2)).max() <= 1


def test_evaluate_and_compare_figures_are_tagged_srgb(tmp_path):
    from vitroll.pipelines.compare import Comparison, plot_comparison
    from vitroll.pipelines.evaluate import Evaluation, MaskedImage, plot_curves, plot_examples

    curve = {"deletion": [np.linspace(1, 0, 5)], "insertion": [np.linspace(0, 1, 5)]}
    evaluation = Evaluation(fractions=np.linspace(0, 1, 5), curves={"rollout": curve},
                            examples={"rollout": [np.ones((8, 8), np.float32)]})
    plot_curves(evaluation, tmp_path / "curves.png")
    plot_examples(evaluation, [MaskedImage("x", np.zeros((8, 8, 3), np.uint8), np.eye(8, dtype=bool))],
                  tmp_path / "examples.png")
    picture = np.zeros((8, 8, 3), np.uint8)
    comparison = Comparison(images=[tmp_path / "x.png"], maps={"a": [np.ones((8, 8))]}, overlays={"a": [picture]},
                            predictions={"a": ["cat (90%)"]}, pictures=[picture])
    plot_comparison(comparison, tmp_path / "grid.png")
    for name in ("curves.png", "examples.png", "grid.png"):
        with Image.open(tmp_path / name) as written:
            written.load()
            assert written.info.get("srgb") == 0, name


def test_a_cmyk_jpeg_is_shown_in_the_colours_its_profile_prints_and_read_as_pillow_converts_it(tmp_path):
    inks = [(255, 0, 0, 0), (0, 0, 0, 255), (0, 0, 0, 0)]  # cyan, black, paper
    cmyk = Image.new("CMYK", (16 * len(inks), 16))
    for index, ink in enumerate(inks):
        cmyk.paste(ink, (16 * index, 0, 16 * (index + 1), 16))
    tagged, untagged = tmp_path / "tagged.jpg", tmp_path / "untagged.jpg"
    cmyk.save(tagged, icc_profile=cmyk_profile(), quality=100)  # Pillow writes Adobe's inverted CMYK
    cmyk.save(untagged, quality=100)
    image, display = load_image_with_display(tagged)
    plain, none = load_image_with_display(untagged)
    assert none is None and np.array_equal(np.asarray(image), np.asarray(plain))
    for index, ink in enumerate(inks):
        naive = np.asarray(Image.new("CMYK", (1, 1), ink).convert("RGB"))[0, 0]
        assert np.abs(np.asarray(image)[8, 16 * index + 8].astype(int) - naive).max() <= 2
        assert np.abs(np.asarray(display)[8, 16 * index + 8] - printed_srgb(ink)).max() <= 8, ink
    from vitroll.audit.pipeline import AuditInput, audit_frames
    from vitroll.audit.records import AuditOptions

    (frame,) = audit_frames(AuditInput(tagged, 1, tagged.name), AuditOptions(salt="s", keep_burned_in_text=True))
    assert np.array_equal(frame.image, np.asarray(image)) and np.array_equal(frame.shown, np.asarray(display))


def test_a_grey_photo_with_a_grey_profile_is_shown_in_srgb_and_read_as_stored(tmp_path):
    path = tmp_path / "grey.png"
    Image.fromarray(np.array([[0, 128, 255]], np.uint8)).save(path, icc_profile=linear_grey_profile())
    image, display = load_image_with_display(path)
    assert np.asarray(image)[0, :, 0].tolist() == [0, 128, 255]
    want = srgb_encode(np.array([0.0, 128 / 255, 1.0])) * 255  # 0, 188, 255
    assert np.abs(np.asarray(display).astype(float) - want[None, :, None]).max() <= 1


def _with_iccp(png: bytes, profile: bytes) -> bytes:
    """``png`` with an ``iCCP`` chunk holding ``profile`` after its header (Pillow writes no 16-bit RGB PNG)."""
    data = b"icc\0\0" + zlib.compress(profile)
    chunk = struct.pack(">I", len(data)) + b"iCCP" + data + struct.pack(">I", zlib.crc32(b"iCCP" + data))
    return png[:33] + chunk + png[33:]


@pytest.mark.parametrize("mode,suffix", [("LA", "png"), ("I;16", "png"), ("I;16", "tif")])
def test_a_grey_and_alpha_or_16_bit_grey_picture_with_a_grey_profile_is_shown_in_srgb(tmp_path, mode, suffix):
    """Only 8-bit grey was converted: grey with alpha and 16-bit grey were drawn with their stored grey levels (128
    for the 188 a colour-managed viewer shows)."""
    path = tmp_path / f"grey.{suffix}"
    levels = np.array([[0, 128, 255]], np.uint8)
    picture = (Image.fromarray(levels.astype(np.uint16) * 257) if mode == "I;16" else
               Image.fromarray(np.stack([levels, np.full_like(levels, 255)], axis=-1), "LA"))
    picture.save(path, icc_profile=linear_grey_profile())
    assert Image.open(path).mode == mode
    image, display = load_image_with_display(path)
    assert np.asarray(image)[0, :, 0].tolist() == [0, 128, 255]
    want = srgb_encode(np.array([0.0, 128 / 255, 1.0])) * 255  # 0, 188, 255
    assert np.abs(np.asarray(display).astype(float) - want[None, :, None]).max() <= 1


def test_a_transparent_grey_pixel_is_shown_white_like_the_model_reads_it(tmp_path):
    path = tmp_path / "cut-out.png"
    Image.fromarray(np.array([[[128, 0], [128, 255]]], np.uint8), "LA").save(path, icc_profile=linear_grey_profile())
    image, display = load_image_with_display(path)
    assert np.asarray(image)[0, :, 0].tolist() == [255, 128]
    assert np.abs(np.asarray(display)[0, :, 0].astype(int) - [255, 188]).max() <= 1


def test_a_16_bit_rgb_png_with_a_display_p3_profile_is_shown_in_srgb(tmp_path):
    import cv2

    path = tmp_path / "p3-16.png"
    stored = np.array([[P3_COLOUR, (0, 0, 0)]], np.uint8)
    _, png = cv2.imencode(".png", cv2.cvtColor(stored.astype(np.uint16) * 257, cv2.COLOR_RGB2BGR))
    path.write_bytes(_with_iccp(png.tobytes(), display_p3_profile()))
    image, display = load_image_with_display(path)
    assert np.array_equal(np.asarray(image), stored)
    assert np.abs(np.asarray(display)[0, 0].astype(float) - p3_to_srgb(P3_COLOUR)).max() <= 1
