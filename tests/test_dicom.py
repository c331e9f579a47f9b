"""DICOM decoding for audits: detection, modality LUT, windows, MONOCHROME1, colour, frames, errors, safe metadata."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("pydicom", minversion="3.0")

from dicom_factory import (
    FAKE_IDS, PHI_STRINGS, body_phantom, rle_segments, patched_testdata, write_dicom,
)
from vitroll.errors import ImageReadError
from vitroll.io.dicom import (
    NOT_DICOM_OR_IMAGE, SAFE_FIELDS, WINDOW_PRESETS, age_band, frame_count, is_dicom, parse_window, read_any,
    read_dicom, safe_metadata, salted_key,
)
from vitroll.wording import worded_for_the_command_line

# Hounsfield values stored as signed 16-bit with RescaleIntercept -1024 (stored = HU + 1024).
HU = np.array([[-1024, -160, 0], [40, 140, 240]], dtype=np.int16)
# W 400, L 40 by DICOM PS3.3 C.11.2.1.2.1: x ≤ L − 0.5 − (W − 1)/2 = −160 → 0; x > L − 0.5 + (W − 1)/2 = 239 → 255;
# else ((x − 39.5)/399 + 0.5)·255: 0 → 102.25, 40 → 127.82, 140 → 191.73.
SOFT_TISSUE = np.array([[0, 0, 102], [128, 192, 255]], dtype=np.uint8)
# MONOCHROME1: 255·(1 − unit): 0 → 255·(1 − 0.40100) = 152.75, 40 → 127.18, 140 → 63.27.
SOFT_TISSUE_INVERTED = np.array([[255, 255, 153], [127, 63, 0]], dtype=np.uint8)


def grey(path: Path, **options) -> np.ndarray:
    decoded = read_dicom(path, **options)
    rgb = decoded.frames[0][1]
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 0] == rgb[..., 2]).all()
    return rgb[..., 0]


def test_detected_by_preamble_with_or_without_extension(tmp_path):
    with_suffix = write_dicom(tmp_path / "a.dcm", body_phantom())
    without = write_dicom(tmp_path / "IMG0001", body_phantom())
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "x.png")
    assert is_dicom(with_suffix) and is_dicom(without)
    assert not is_dicom(tmp_path / "x.png") and not is_dicom(tmp_path / "missing")
    assert read_any(without).frames[0][1].shape == (64, 64, 3)


def test_window_presets_and_parsing():
    assert WINDOW_PRESETS == {"lung": (1500, -600), "bone": (2000, 300), "soft-tissue": (400, 40)}
    assert parse_window("Lung") == (1500, -600) and parse_window("soft_tissue") == (400, 40)
    assert parse_window("350,50") == (350, 50) and parse_window("1500,-600") == (1500, -600)
    assert parse_window(None) is None
    for bad in ("wide", "40", "0,40", "a,b"):
        with pytest.raises(ValueError, match="window"):
            parse_window(bad)


def test_user_window_on_rescaled_16_bit_matches_hand_computed_values(tmp_path):
    path = write_dicom(tmp_path / "ct.dcm", HU + 1024, signed=True, slope=1.0, intercept=-1024.0)
    np.testing.assert_array_equal(grey(path, window=parse_window("soft-tissue")), SOFT_TISSUE)
    # lung W 1500, L −600: −1024 → ((−1024 + 600.5)/1499 + 0.5)·255 = 55.46; 40 → (640.5/1499 + 0.5)·255 = 236.46
    lung = grey(path, window=parse_window("lung"))
    assert lung[0, 0] == 55 and lung[1, 0] == 236


def test_window_tags_used_when_no_window_is_given_and_overridden_by_one(tmp_path):
    path = write_dicom(tmp_path / "ct.dcm", HU + 1024, signed=True, slope=1.0, intercept=-1024.0, window=(400, 40))
    np.testing.assert_array_equal(grey(path), SOFT_TISSUE)
    assert grey(path, window=(1500, -600))[0, 0] == 55


def test_enhanced_multi_frame_rescale_and_windows_come_from_its_functional_groups(tmp_path):
    """An enhanced CT keeps Rescale Slope/Intercept in its shared functional groups and a window per frame: the
    stored values were windowed as if they were HU (--window soft-tissue showed the whole frame white) and the
    frames' windows were ignored for the min–max."""
    import pydicom
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence

    def group(**macros: dict) -> Dataset:
        item = Dataset()
        for name, attributes in macros.items():
            macro = Dataset()
            for keyword, value in attributes.items():
                setattr(macro, keyword, value)
            setattr(item, name, Sequence([macro]))
        return item

    path = write_dicom(tmp_path / "enhanced.dcm", np.stack([HU + 1024] * 3).astype(np.uint16),
                       SOPClassUID="1.2.840.10008.5.1.4.1.1.2.1")
    dataset = pydicom.dcmread(path)
    dataset.SharedFunctionalGroupsSequence = Sequence([group(PixelValueTransformationSequence={
        "RescaleSlope": 1, "RescaleIntercept": -1024, "RescaleType": "HU"})])
    dataset.PerFrameFunctionalGroupsSequence = Sequence([
        group(FrameVOILUTSequence={"WindowWidth": width, "WindowCenter": level})
        for width, level in ((400, 40), (1500, -600), (400, 40))])
    dataset.save_as(path)
    np.testing.assert_array_equal(grey(path, frame=0, window=parse_window("soft-tissue")), SOFT_TISSUE)
    np.testing.assert_array_equal(grey(path, frame=0), SOFT_TISSUE)
    lung = grey(path, frame=1)
    assert lung[0, 0] == 55 and lung[1, 0] == 236  # as test_user_window_on_rescaled_16_bit_matches_hand_computed_values


def test_rescale_slope_and_intercept_then_min_max(tmp_path):
    stored = np.array([[0, 25], [100, 100]], dtype=np.uint16)  # HU = 2·stored − 100: −100, −50, 100
    path = write_dicom(tmp_path / "r.dcm", stored, slope=2.0, intercept=-100.0)
    np.testing.assert_array_equal(grey(path), [[0, 64], [255, 255]])  # (−50 + 100)/200·255 = 63.75


def test_monochrome1_is_inverted_after_windowing(tmp_path):
    path = write_dicom(tmp_path / "m1.dcm", HU + 1024, signed=True, slope=1.0, intercept=-1024.0,
                       window=(400, 40), photometric="MONOCHROME1")
    np.testing.assert_array_equal(grey(path), SOFT_TISSUE_INVERTED)
    plain = write_dicom(tmp_path / "m1plain.dcm", np.array([[0, 10], [20, 40]], np.uint16), photometric="MONOCHROME1")
    np.testing.assert_array_equal(grey(plain), [[255, 191], [128, 0]])  # 255·(1 − x/40): 191.25, 127.5


@pytest.mark.parametrize(("photometric", "dtype", "low", "padding"), [
    ("MONOCHROME2", np.uint16, 100, 65535), ("MONOCHROME1", np.uint16, 100, 65535),
    ("MONOCHROME2", np.int16, -1000, -2000),
])
def test_pixel_padding_is_black_and_out_of_the_min_max(tmp_path, photometric, dtype, low, padding):
    """Outside a CT's circular field of view: 65535 in the min–max showed the body at 4 of 255 and the padding white."""
    pixels = body_phantom(64, marker=False, dtype=dtype, low=low, high=low + 2000)
    yy, xx = np.mgrid[:64, :64]
    outside_view = (yy - 32) ** 2 + (xx - 32) ** 2 > 30 ** 2
    pixels[outside_view] = padding
    path = write_dicom(tmp_path / "padded.dcm", pixels, photometric=photometric, signed=dtype == np.int16,
                       PixelPaddingValue=padding)
    shown = read_dicom(path).frames[0][1][..., 0]
    body, air = (255, 0) if photometric == "MONOCHROME2" else (0, 255)
    assert set(np.unique(shown[outside_view])) == {0}
    assert set(np.unique(shown[~outside_view])) == {body, air}
    assert shown[32, 32] == body


def test_multi_frame_all_frames_or_one(tmp_path):
    frames = np.stack([np.full((8, 8), v, np.uint16) for v in (0, 50, 100)])
    path = write_dicom(tmp_path / "cine.dcm", frames, window=(100, 50))
    decoded = read_dicom(path)
    assert [index for index, _ in decoded.frames] == [0, 1, 2]
    # W 100, L 50: 0 ≤ 0 → 0; ((50 − 49.5)/99 + 0.5)·255 = 128.79; 100 > 99 → 255
    assert [int(rgb[4, 4, 0]) for _, rgb in decoded.frames] == [0, 129, 255]
    only = read_dicom(path, frame=1)
    assert [index for index, _ in only.frames] == [1]
    with pytest.raises(ImageReadError, match="out of range: the file has 3 frame"):
        read_dicom(path, frame=3)


def _read_with_peak_memory(path, frames: range):
    """``read_dicom(path, frames=frames)`` and the peak of the memory Python allocated meanwhile, in bytes."""
    import tracemalloc

    tracemalloc.start()
    try:
        return read_dicom(path, frames=frames), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_part_of_a_long_cine_is_read_from_the_file_without_its_other_frames(tmp_path):
    """frames=range(...) decodes those frames alone, and the pixel data of the rest never enters memory: a part of
    8 frames of a 48 MiB file peaks far below the file's size (the whole-array read peaked above it)."""
    frames = np.arange(384, dtype=np.uint16)[:, None, None] * np.ones((1, 256, 256), np.uint16)
    path = write_dicom(tmp_path / "cine.dcm", frames, window=(1000, 500))
    part, peak = _read_with_peak_memory(path, frames=range(200, 208))
    assert part.frame_count == 384 and [index for index, _ in part.frames] == list(range(200, 208))
    np.testing.assert_array_equal([rgb[0, 0, 0] for _, rgb in part.frames],
                                  [grey(path, frame=index)[0, 0] for index in range(200, 208)])
    assert peak < 8 * 2**20 < frames.nbytes / 4, f"peak {peak / 2**20:.1f} MiB"
    assert [index for index, _ in read_dicom(path, frames=range(380, 388)).frames] == [380, 381, 382, 383]


def test_a_part_of_a_compressed_cine_is_read_from_the_file_without_its_other_frames(tmp_path):
    """RLE: frames=range(...) decodes those frames through their own fragments; the other frames' compressed data
    never enters memory (it was loaded whole for every part: a 1000-frame 256 × 256 RLE cine of 74 MB audited in
    parts of 8 took 8.9 s CPU and peaked 75 MB above the process, now 1.7 s and 2 MB)."""
    import pydicom
    from pydicom.uid import RLELossless

    rng = np.random.default_rng(0)
    frames = body_phantom(256, marker=False) + rng.integers(0, 64, (384, 256, 256), dtype=np.uint16)
    dataset = pydicom.dcmread(write_dicom(tmp_path / "native.dcm", frames))
    dataset.compress(RLELossless, encoding_plugin="pylibjpeg")
    path = tmp_path / "rle.dcm"
    dataset.save_as(path)
    assert path.stat().st_size > 16 * 2**20
    part, peak = _read_with_peak_memory(path, frames=range(200, 208))
    assert [index for index, _ in part.frames] == list(range(200, 208))
    for index, rgb in part.frames:
        np.testing.assert_array_equal(rgb, read_dicom(tmp_path / "native.dcm", frame=index).frames[0][1])
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_a_part_of_a_cine_no_decoder_reads_fails_without_loading_its_other_frames(tmp_path):
    """A compressed cine whose frames every decoder plugin refuses (12-bit JPEG Extended): a part of 8 frames fails
    with pydicom's reasons without being retried through the data set, whose pixel data is the whole cine (it was
    loaded whole for every part: a 400-frame 2.7 MB cine audited in parts of 8 read 302 MB, now 83 MB)."""
    import tracemalloc

    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.encaps import encapsulate, generate_frames

    dataset = pydicom.dcmread(get_testdata_file("JPGExtended.dcm"))
    frame = next(generate_frames(dataset.PixelData, number_of_frames=1))
    dataset.PixelData = encapsulate([frame] * 2000)
    dataset.NumberOfFrames = 2000
    path = tmp_path / "cine.dcm"
    dataset.save_as(path)
    assert path.stat().st_size > 12 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(ImageReadError) as raised:
            read_dicom(path, frames=range(8, 16))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raised.value.reason.startswith(
        "The compressed pixel data cannot be decoded: each decoder installed for its transfer syntax, JPEG Extended "
        "(Process 2 and 4) (UID 1.2.840.10008.1.2.4.51), failed (gdcm: GDCM does not support 'JPEG Extended' for "
        "samples with 12-bit precision; pillow: ")
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_when_every_decoder_fails_the_reason_gives_their_reasons_apart_from_what_to_try(monkeypatch):
    """pydicom's "Unable to decode as exceptions were raised by all available plugins:" was quoted after "pydicom
    said:", its plugins' reasons run on into the advice with the same "; " ("pillow: …; pydicom's pylibjpeg plugin
    would also try it"), and pydicom's decoder for the transfer syntax was looked up twice. The plugins' reasons are
    now in brackets after what failed and the transfer syntax, then what to try; the decoder is looked up once.
    GDCM's failure, which pydicom's plugin meets as "'NoneType' object has no attribute 'encode'", is said in words."""
    from pydicom.data import get_testdata_file

    import vitroll.io.dicom.reading as dicom

    looked_up, decoder = [], dicom._decoder
    monkeypatch.setattr(dicom, "_decoder", lambda uid: looked_up.append(uid) or decoder(uid))
    with pytest.raises(ImageReadError) as caught:
        read_dicom(get_testdata_file("JPEG-lossy.dcm"))
    assert len(looked_up) == 1
    reason = caught.value.reason
    assert reason.startswith("The compressed pixel data cannot be decoded: each decoder installed for its transfer "
                             "syntax, JPEG Extended (Process 2 and 4) (UID 1.2.840.10008.1.2.4.51), failed (gdcm: ")
    assert reason.endswith("); pydicom's pylibjpeg plugin would also try it, with pylibjpeg>=2.0 and "
                           "pylibjpeg-libjpeg>=2.1 (pylibjpeg-libjpeg is GPL-3.0, so vitroll does not install it).")
    assert "Unable to decode" not in reason and "pydicom said" not in reason
    with pytest.raises(ImageReadError) as caught:
        read_dicom(get_testdata_file("JPEG2000-embedded-sequence-delimiter.dcm"))
    reason = caught.value.reason
    assert reason.startswith("The compressed pixel data cannot be decoded: every pydicom decoder for its transfer "
                             "syntax, JPEG 2000 Image Compression (UID 1.2.840.10008.1.2.4.91), is installed and each "
                             "failed (gdcm: GDCM decoded no pixels from the frame and gave no reason; pylibjpeg: ")
    assert reason.endswith("), so the pixel data itself is damaged or unusual; exporting it again from its source (the "
                           "PACS or the scanner), uncompressed if offered, may give a readable file.")


def test_pillows_refusal_of_a_frame_stating_a_size_over_its_limit_is_said_in_words_with_the_sizes():
    """pydicom's JPEG2000-embedded-sequence-delimiter.dcm (a damaged codestream) quoted Pillow's "Image size
    (3811783737344 pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack"."""
    from pydicom.data import get_testdata_file

    with pytest.raises(ImageReadError) as caught:
        read_dicom(get_testdata_file("JPEG2000-embedded-sequence-delimiter.dcm"))
    reason = caught.value.reason
    assert "pillow: " in reason and "decompression bomb" not in reason and "Image size" not in reason
    assert ("pillow: the frame's compressed data states an image of 3811784 MP, over Pillow's limit of 179 MP, where "
            "the DICOM header states 256 × 1024 pixels, so Pillow did not decode it)") in reason


def test_a_data_set_encoded_unlike_its_transfer_syntax_is_decoded_through_the_data_set():
    """An implicit VR data set under an explicit VR transfer syntax (as pydicom's SC_rgb_jpeg.dcm): pydicom cannot
    find its compressed frames in the file, only in the data set it reads, so the frames are decoded from there."""
    from pydicom.data import get_testdata_file

    decoded = read_dicom(get_testdata_file("SC_rgb_jpeg.dcm"))
    assert decoded.colour and decoded.frames[0][1].shape == (256, 256, 3)


def test_rgb_and_ybr_colour(tmp_path):
    from pydicom.pixels import convert_color_space

    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
    assert (read_dicom(write_dicom(tmp_path / "rgb.dcm", rgb, photometric="RGB")).frames[0][1] == rgb).all()
    ybr = convert_color_space(rgb, "RGB", "YBR_FULL")
    back = read_dicom(write_dicom(tmp_path / "ybr.dcm", ybr, photometric="YBR_FULL")).frames[0][1]
    assert np.abs(back.astype(int) - rgb).max() <= 3


@pytest.mark.parametrize(("photometric", "samples", "reason"), [
    ("MONOCHROME2", 3, "This DICOM file's header is inconsistent: SamplesPerPixel is 3, but PhotometricInterpretation "
                       "MONOCHROME2 has 1 sample per pixel, so its pixels cannot be told apart."),
    ("PALETTE COLOR", 3,
     "This DICOM file's header is inconsistent: SamplesPerPixel is 3, but PhotometricInterpretation "
                         "PALETTE COLOR has 1 sample per pixel, so its pixels cannot be told apart."),
    ("HSV", 3,
     "This DICOM file's PhotometricInterpretation, HSV, is not one that vitroll converts to RGB, so its pixels "
               "are not shown."),
    (FAKE_IDS["StudyID"], 3, "This DICOM file's PhotometricInterpretation is no DICOM term, so how its 3 samples per "
                             "pixel make a colour is not said."),
    ("RGB", 1, "This DICOM file's header is inconsistent: SamplesPerPixel is 1, but PhotometricInterpretation RGB "
               "has 3 samples per pixel, so its pixels cannot be told apart."),
])
def test_a_colour_header_that_does_not_hold_together_is_named_in_vitrolls_words(tmp_path, photometric, samples,
                                                                                 reason):
    """SamplesPerPixel 3 with MONOCHROME2 was reported as "pydicom said: unsupported PhotometricInterpretation" (words
    of vitroll's own, put in pydicom's mouth) and as damaged pixel data; a palette with 3 samples quoted pydicom's
    missing lookup table; RGB with 1 sample was shown as grey from the first third of its bytes. The reason now says
    what in the header disagrees, and quotes no value that is no DICOM term."""
    import pydicom

    path = write_dicom(tmp_path / "colour.dcm", np.zeros((8, 8, 3), np.uint8), photometric="RGB")
    dataset = pydicom.dcmread(path)
    dataset.PhotometricInterpretation = photometric
    dataset.SamplesPerPixel = samples
    dataset.save_as(path)
    with pytest.raises(ImageReadError) as caught:
        read_dicom(path)
    assert caught.value.reason == reason


def header_lie(tmp_path: Path, name: str, **changes: object) -> Path:
    """pydicom's bundled file ``name`` saved under ``tmp_path`` with the header elements ``changes`` (None: removed)."""
    import pydicom
    from pydicom.data import get_testdata_file

    dataset = pydicom.dcmread(get_testdata_file(name))
    for keyword, value in changes.items():
        if value is None:
            del dataset[keyword]
        else:
            setattr(dataset, keyword, value)
    path = tmp_path / name
    dataset.save_as(path)
    return path


@pytest.mark.parametrize("name", ["SC_rgb_rle_2frame.dcm", "JPEG2000.dcm"])
def test_a_compressed_frame_over_the_limit_is_refused_from_its_header_before_any_decoding(tmp_path, monkeypatch, name):
    """A compressed frame is a few bytes whatever Rows × Columns it states (a constant 65535² JPEG 2000 frame is
    tiny), and was decoded whatever its size: --max-pixels limits compressed DICOM frames as it does images, in its
    words (native pixel data holds every pixel it states: not limited)."""
    import pydicom.pixels

    from vitroll.io.dicom import reading

    path = header_lie(tmp_path, name, Rows=30_000, Columns=20_000)
    decoded = []
    monkeypatch.setattr(pydicom.pixels, "iter_pixels", lambda *args, **kwargs: decoded.append(args) or iter(()))
    monkeypatch.setattr(reading, "_compressed_problem", lambda *args, **kwargs: decoded.append(args))
    with pytest.raises(ImageReadError) as info:
        read_any(path)
    assert info.value.reason == ("image too large: 600 MP (20000×30000), over the limit of 500 MP; "
                                 "max_pixels=600_000_000 reads it if the memory allows (an overlay takes about 20 "
                                 "bytes a pixel)")
    assert decoded == []
    with pytest.raises(ImageReadError, match=r"0.06 MP \(200×300\), over the limit of 0.05 MP"):
        read_dicom(header_lie(tmp_path, name, Rows=300, Columns=200), max_pixels=50_000)
    assert decoded == []
    read_any(path, max_pixels=None)  # no limit: read on, where the stubs stand in for the decoders
    assert decoded
    with pytest.raises(ImageReadError, match=DOES_NOT_FIT):  # native: its pixel data's length is what is refused
        read_any(header_lie(tmp_path, "CT_small.dcm", Rows=30_000, Columns=20_000))


DOES_NOT_FIT = "This DICOM file's header does not fit its pixel data: "
NOT_SHOWN = ", so the image would be drawn wrong and is not shown."


@pytest.mark.parametrize(("name", "changes", "mismatch"), [
    ("examples_rgb_color.dcm", {"PhotometricInterpretation": "MONOCHROME2", "SamplesPerPixel": 1},
     "Rows 240, Columns 320, SamplesPerPixel 1 and BitsAllocated 8 over 1 frame make 76800 bytes, but its pixel data "
     "holds 230400 (3 times that)"),
    ("CT_small.dcm", {"Rows": 64}, "Rows 64, Columns 128, SamplesPerPixel 1 and BitsAllocated 16 over 1 frame make "
                                   "16384 bytes, but its pixel data holds 32768 (2 times that)"),
    ("CT_small.dcm", {"Columns": 127}, "Rows 128, Columns 127, SamplesPerPixel 1 and BitsAllocated 16 over 1 frame "
                                      "make 32512 bytes, but its pixel data holds 32768"),
    ("CT_small.dcm", {"BitsAllocated": 8, "BitsStored": 8, "HighBit": 7},
     "Rows 128, Columns 128, SamplesPerPixel 1 and BitsAllocated 8 over 1 frame make 16384 bytes, but its pixel data "
     "holds 32768 (2 times that)"),
    ("examples_palette.dcm", {"BitsAllocated": 16},
     "Rows 350, Columns 800, SamplesPerPixel 1 and BitsAllocated 16 over 1 frame make 560000 bytes, but its pixel data "
     "holds 280000 (1/2 of that)"),
    ("rtdose.dcm", {"NumberOfFrames": 5}, "Rows 10, Columns 10, SamplesPerPixel 1 and BitsAllocated 32 over 5 frames "
                                          "make 2000 bytes, but its pixel data holds 6000 (3 times that)"),
    ("rtdose.dcm", {"NumberOfFrames": 20}, "Rows 10, Columns 10, SamplesPerPixel 1 and BitsAllocated 32 over 20 frames "
                                           "make 8000 bytes, but its pixel data holds 6000 (15 frames of the 20 its "
                                           "header counts)"),
    ("liver_1frame.dcm", {"Columns": 256}, "Rows 512, Columns 256, SamplesPerPixel 1 and BitsAllocated 1 over 1 frame "
                                           "make 16384 bytes, but its pixel data holds 32768 (2 times that)"),
    ("examples_rgb_color.dcm", {"PhotometricInterpretation": "YBR_FULL_422"},
     "Rows 240, Columns 320, SamplesPerPixel 3, PhotometricInterpretation YBR_FULL_422 and BitsAllocated 8 over 1 "
     "frame make 153600 bytes, but its pixel data holds 230400"),
    ("image_dfl.dcm", {"Rows": 256}, "Rows 256, Columns 512, SamplesPerPixel 1 and BitsAllocated 8 over 1 frame make "
                                     "131072 bytes, but its pixel data holds 262144 (2 times that)"),
    ("MR_small_bigendian.dcm", {"Rows": 128}, "Rows 128, Columns 64, SamplesPerPixel 1 and BitsAllocated 16 over 1 "
                                              "frame make 16384 bytes, but its pixel data holds 8192 (1/2 of that)"),
    ("CT_small.dcm", {"Rows": 0}, "Rows 0, Columns 128, SamplesPerPixel 1 and BitsAllocated 16 over 1 frame make 0 "
                                  "bytes, but its pixel data holds 32768"),
])
def test_a_header_whose_image_is_not_the_length_of_its_pixel_data_is_refused_naming_both(tmp_path, name, changes,
                                                                                        mismatch):
    """pydicom reads a frame from the first bytes of native pixel data of any greater length (and of a deflated data
    set's), so a grey header over RGB bytes showed the first third of them as a grey image, too few rows the top of
    the image, Columns one short a sheared one, BitsAllocated 8 over 16-bit data the low bytes as pixels, and fewer
    frames than there are the first ones only: a wrong image shown as if it were right. Too few bytes were refused in
    pydicom's words after "damaged or unusual" advice. Both are now refused before decoding, naming the numbers."""
    with pytest.raises(ImageReadError) as caught:
        read_dicom(header_lie(tmp_path, name, **changes))
    assert caught.value.reason == DOES_NOT_FIT + mismatch + NOT_SHOWN


@pytest.mark.parametrize(("name", "changes", "mismatch"), [
    ("SC_rgb_rle.dcm", {"Rows": 50},
     "Rows 50, Columns 100, SamplesPerPixel 3 and BitsAllocated 8, but its RLE data has 3 segments (one per "
     "sample and byte of a sample), the first decoding to 10000 bytes (Rows × Columns)"),
    ("MR_small_RLE.dcm", {"BitsAllocated": 8, "BitsStored": 8, "HighBit": 7},
     "Rows 64, Columns 64, SamplesPerPixel 1 and BitsAllocated 8, but its RLE data has 2 segments (one per "
     "sample and byte of a sample), the first decoding to 4096 bytes (Rows × Columns)"),
    ("SC_rgb_jpeg_gdcm.dcm", {"SamplesPerPixel": 1, "PhotometricInterpretation": "MONOCHROME2"},
     "Rows 100, Columns 100, SamplesPerPixel 1 and BitsAllocated 8, but its JPEG codestream is 100 rows by 100 "
     "columns with 3 components of 8 bits"),
    ("SC_rgb_jpeg_dcmtk.dcm", {"Rows": 50}, "Rows 50, Columns 100, SamplesPerPixel 3 and BitsAllocated 8, but its "
                                            "JPEG codestream is 100 rows by 100 columns with 3 components of 8 bits"),
    ("MR_small_jpeg_ls_lossless.dcm", {"Rows": 32},
     "Rows 32, Columns 64, SamplesPerPixel 1 and BitsAllocated 16, but its JPEG-LS codestream is 64 rows by 64 columns "
     "with 1 component of 16 bits"),
    ("MR_small_jpeg_ls_lossless.dcm", {"BitsAllocated": 8, "BitsStored": 8, "HighBit": 7},
     "Rows 64, Columns 64, SamplesPerPixel 1 and BitsAllocated 8, but its JPEG-LS codestream is 64 rows by 64 columns "
     "with 1 component of 16 bits"),
    ("MR_small_jp2klossless.dcm", {"Columns": 65},
     "Rows 64, Columns 65, SamplesPerPixel 1 and BitsAllocated 16, but its JPEG 2000 codestream is 64 rows by 64 "
     "columns with 1 component of 16 bits"),
])
def test_a_header_unlike_what_its_compressed_frames_state_is_refused_naming_both(tmp_path, name, changes, mismatch):
    """A decoder takes the header's size as given: RLE with Rows 50 over 100 showed the top half as the whole image,
    and JPEG-LS with Rows 32 its first half; a colour JPEG whose header says 1 sample, MONOCHROME2 was drawn grey;
    16-bit JPEG-LS under BitsAllocated 8 was drawn from cut samples. What
    a frame states of itself (a JPEG SOF, a JPEG 2000 SIZ, an RLE header and its first segment) is now compared."""
    with pytest.raises(ImageReadError) as caught:
        read_dicom(header_lie(tmp_path, name, **changes))
    assert caught.value.reason == DOES_NOT_FIT + mismatch + NOT_SHOWN


def test_an_rle_segment_s_length_is_counted_as_pydicom_s_decoder_decodes_it():
    """The first segment of each RLE frame shown was decoded in pure Python to compare its length with Rows ×
    Columns, about as long as decoding the frame: counted from its run headers, to the same length (runs cut short by
    the segment's end, no-op headers and empty segments included)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from pydicom.pixels.decoders.rle import _rle_decode_segment

    from vitroll.io.dicom.reading import rle_segment_length

    @settings(max_examples=500, deadline=None)
    @given(st.binary(max_size=300) | st.lists(st.sampled_from([b"\x7f", b"\x80", b"\x81", b"\xff", b"\x00", b"\x05"]),
                                              max_size=40).map(b"".join))
    def agrees(segment: bytes) -> None:
        assert rle_segment_length(segment) == len(_rle_decode_segment(segment))

    agrees()
    assert rle_segment_length(bytes([255, 7]) * 3 + bytes([2, 1, 2, 3, 128, 130])) == 2 * 3 + 3 + 0


def _sof_height(codestream: bytearray, height: int) -> bytes:
    start = codestream.find(b"\xff\xc0")  # baseline SOF: length (2 bytes), precision, then the height
    codestream[start + 5:start + 7] = height.to_bytes(2, "big")
    return bytes(codestream)


@pytest.mark.parametrize(("name", "count", "frame", "patch", "mismatch"), [
    ("examples_ybr_color.dcm", 30, 3, lambda codestream: _sof_height(codestream, 120),
     "Rows 240, Columns 320, SamplesPerPixel 3 and BitsAllocated 8, but frame 3's JPEG codestream is 120 rows by 320 "
     "columns with 3 components of 8 bits"),
    ("SC_rgb_rle_2frame.dcm", 2, 1, lambda frame: rle_segments(frame, 2),
     "Rows 100, Columns 100, SamplesPerPixel 3 and BitsAllocated 8, but frame 1's RLE data has 2 segments (one per "
     "sample and byte of a sample), the first decoding to 10000 bytes (Rows × Columns)"),
])
def test_a_later_frame_unlike_the_header_is_refused_naming_it(tmp_path, name, count, frame, patch, mismatch):
    """Only frame 0's codestream was compared with the header: a later JPEG frame of 120 rows under Rows 240 failed in
    Python's words ("could not broadcast input array…") after advice to install a GPL decoder, and an RLE frame of
    2 segments under 3 samples was decoded as it was. Each frame decoded is now compared, and named."""
    patched = patched_testdata(tmp_path / name, name, count, {frame: patch})
    with pytest.raises(ImageReadError) as caught:
        read_dicom(patched)
    assert caught.value.reason == DOES_NOT_FIT + mismatch + NOT_SHOWN
    assert [index for index, _ in read_dicom(patched, frames=range(frame)).frames] == list(range(frame))  # the others
    # are as the header says: an audit, which reads a long file a part at a time, shows the parts without frame 3


@pytest.mark.parametrize(("frames", "held"), [(1, "frames would be left out without a word"),
                                              (3, "frames it is said to have are missing")])
def test_a_number_of_frames_unlike_the_compressed_frames_is_refused_naming_both(tmp_path, frames, held):
    """SC_rgb_rle_2frame.dcm with NumberOfFrames 1 showed its first frame alone, without a word."""
    with pytest.raises(ImageReadError) as caught:
        read_dicom(header_lie(tmp_path, "SC_rgb_rle_2frame.dcm", NumberOfFrames=frames))
    assert caught.value.reason == (f"{DOES_NOT_FIT}NumberOfFrames is {frames}, but its Basic Offset Table lists 2 "
                                   f"frames, so {held}; it is not shown.")


def test_compressed_frames_without_an_offset_table_are_counted_by_their_codestreams(tmp_path):
    """Without a Basic Offset Table, the fragments that begin a codestream are the frames; a frame may span several
    fragments."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.encaps import encapsulate, generate_frames

    dataset = pydicom.dcmread(get_testdata_file("SC_rgb_rle_2frame.dcm"))
    frames = list(generate_frames(dataset.PixelData, number_of_frames=2))
    dataset.PixelData = encapsulate(frames, has_bot=False)
    dataset.NumberOfFrames = 1
    dataset.save_as(tmp_path / "no_table.dcm")
    with pytest.raises(ImageReadError) as caught:
        read_dicom(tmp_path / "no_table.dcm")
    assert caught.value.reason == (f"{DOES_NOT_FIT}NumberOfFrames is 1, but its fragments begin 2 frames, so frames "
                                   "would be left out without a word; it is not shown.")
    jpeg = pydicom.dcmread(get_testdata_file("SC_rgb_jpeg_dcmtk.dcm"))
    whole = read_dicom(get_testdata_file("SC_rgb_jpeg_dcmtk.dcm")).frames[0][1]
    frame = next(generate_frames(jpeg.PixelData, number_of_frames=1))
    jpeg.PixelData = encapsulate([frame], fragments_per_frame=3, has_bot=False)
    jpeg.save_as(tmp_path / "fragmented.dcm")
    np.testing.assert_array_equal(read_dicom(tmp_path / "fragmented.dcm").frames[0][1], whole)


@pytest.mark.parametrize(("changes", "said"), [
    ({"PlanarConfiguration": None}, "Missing required element: (0028,0006) 'Planar Configuration'"),
    ({"BitsStored": 20}, "A (0028,0101) 'Bits Stored' value of '20' is invalid, it must be in the range (1, 64) and no "
                         "greater than the (0028,0100) 'Bits Allocated' value of '8'"),
])
def test_uncompressed_pixel_data_that_fails_blames_the_header_not_the_decoders(tmp_path, changes, said):
    """Native pixel data pydicom refuses for a missing or invalid group 0028 element was said to be "damaged or
    unusual" because "every pydicom decoder for it is installed": no decoder is involved, the header is at fault."""
    with pytest.raises(ImageReadError) as caught:
        read_dicom(header_lie(tmp_path, "examples_rgb_color.dcm", **changes))
    assert caught.value.reason == (
        "The pixel data cannot be decoded: transfer syntax Explicit VR Little Endian (UID 1.2.840.10008.1.2.1); "
        f"pydicom said: {said}; uncompressed pixel data needs no decoder, so it is the header that does not describe "
        "it: its image pixel elements (group 0028) or its transfer syntax.")


def test_a_decoder_that_panics_fails_its_file_in_one_sentence(tmp_path, monkeypatch):
    """RLE data whose header says Columns 32 for 64: pylibjpeg-rle (Rust) panics, raising
    ``pyo3_runtime.PanicException``, a BaseException that passed ``except Exception`` in the reader and in the audit's
    per-file guard, so one file stopped the whole audit with a traceback. It is now that file's reason."""
    import vitroll.io.dicom.reading as dicom

    lie = header_lie(tmp_path, "MR_small_RLE.dcm", Columns=32)
    with pytest.raises(ImageReadError) as caught:
        read_dicom(lie)
    assert caught.value.reason.startswith(DOES_NOT_FIT + "Rows 64, Columns 32,")  # now told before decoding
    monkeypatch.setattr(dicom, "_compressed_problem", lambda *args, **kwargs: None)
    with pytest.raises(ImageReadError) as caught:
        read_dicom(lie)
    reason = caught.value.reason
    assert reason.startswith("The compressed pixel data cannot be decoded: ") and "RLE Lossless" in reason
    assert reason.endswith(".") and "\n" not in reason


def test_a_negative_number_of_frames_is_refused(tmp_path):
    """NumberOfFrames -3 gave a file with no frame, so an audit had no row for it."""
    with pytest.raises(ImageReadError) as caught:
        read_dicom(header_lie(tmp_path, "rtdose.dcm", NumberOfFrames=-3))
    assert caught.value.reason == "This DICOM file's NumberOfFrames is -3, so its frames cannot be counted."


@pytest.mark.parametrize("name", ["MR_small_padded.dcm", "SC_rgb_small_odd.dcm", "SC_rgb_small_odd_big_endian.dcm",
                                  "SC_ybr_full_422_uncompressed.dcm", "liver_1frame.dcm", "rtdose.dcm"])
def test_pixel_data_padded_with_zero_bytes_still_reads(name):
    """One byte after an odd length (a 3 × 3 RGB image's 27 bytes) and trailing zero bytes (MR_small_padded.dcm:
    128 past its 8192) are padding, as pydicom reads them; the image is the unpadded file's."""
    from pydicom.data import get_testdata_file

    decoded = read_dicom(get_testdata_file(name))
    assert decoded.frames and decoded.frames[0][1].std() > 0
    if name == "MR_small_padded.dcm":
        assert (decoded.frames[0][1] == read_dicom(get_testdata_file("MR_small.dcm")).frames[0][1]).all()


def test_excess_pixel_data_left_in_the_file_is_judged_by_its_bytes(tmp_path):
    """A Part 10 file's pixel data larger than :data:`PIXEL_DATA_DEFERRED` stays in the file while frames are read
    one at a time: its bytes past the frames are read from there, zeros allowed, anything else refused."""
    import pydicom

    image = body_phantom(512)
    path = write_dicom(tmp_path / "big.dcm", image)
    dataset = pydicom.dcmread(path)
    frame = dataset.PixelData
    dataset.PixelData = frame + bytes(3 * 2**20)  # more than one part of the zero check
    dataset.save_as(path)
    assert (grey(path) > 0).sum() == (image > 0).sum()
    dataset.PixelData = frame + bytes(3 * 2**20) + b"\x01\x00"
    dataset.save_as(path)
    with pytest.raises(ImageReadError) as caught:
        read_dicom(path)
    assert caught.value.reason == (DOES_NOT_FIT + "Rows 512, Columns 512, SamplesPerPixel 1 and BitsAllocated 16 over "
                                   "1 frame make 524288 bytes, but its pixel data holds 3670018" + NOT_SHOWN)


def with_raw_element(path: Path, tag: int, vr: str, value: str) -> Path:
    """Rewrite ``path`` with element ``tag`` holding ``value`` as it is, however invalid for ``vr``."""
    import pydicom
    from pydicom.dataelem import RawDataElement
    from pydicom.tag import Tag

    dataset = pydicom.dcmread(path)
    dataset[tag] = RawDataElement(Tag(tag), vr, len(value), value.encode("ascii"), 0, False, True)
    dataset.save_as(path)
    return path


def test_unreadable_files_raise_one_line_reasons(tmp_path):
    from pydicom.uid import JPEGBaseline8Bit

    good = write_dicom(tmp_path / "good.dcm", body_phantom())
    truncated = tmp_path / "truncated.dcm"
    truncated.write_bytes(good.read_bytes()[:-500])
    no_pixels = write_dicom(tmp_path / "nopixels.dcm", body_phantom(), with_pixels=False)
    jpeg = write_dicom(tmp_path / "jpeg.dcm", body_phantom(dtype=np.uint8, high=255), transfer_syntax=JPEGBaseline8Bit,
                       pixel_bytes=b"\xff\xd8 not really a jpeg " * 8)
    text = tmp_path / "notes.dcm"
    text.write_text("not a DICOM file at all")
    frames = with_raw_element(write_dicom(tmp_path / "frames.dcm", body_phantom()), 0x00280008, "IS",
                              FAKE_IDS["PatientID"] + " ")  # NumberOfFrames
    reasons = {}
    for path in (truncated, no_pixels, jpeg, text, frames):
        with pytest.raises(ImageReadError) as caught:
            read_any(path)
        assert "\n" not in caught.value.reason
        reasons[path.stem] = caught.value.reason
    assert reasons["truncated"] == ("This DICOM file (Secondary Capture Image Storage) is cut short: it ends in the "
                                    "middle of its pixel data, so the image is incomplete and is not shown.")
    assert reasons["nopixels"] == ("This DICOM file (Secondary Capture Image Storage) has no PixelData, so there is no "
                                   "image to explain.")
    assert reasons["jpeg"].startswith("The compressed pixel data cannot be decoded: each decoder installed for its "
                                      "transfer syntax, JPEG Baseline")
    assert reasons["notes"] == NOT_DICOM_OR_IMAGE
    assert reasons["frames"] == ("This DICOM file's NumberOfFrames is not a whole number, so its frames cannot be "
                                 "counted.")  # its value, which could be any text, is not quoted


@pytest.mark.parametrize(("implicit", "little"), [(True, True), (False, True), (False, False)])
def test_a_data_set_without_preamble_or_file_meta_decodes_like_the_part_10_file(tmp_path, implicit, little):
    import pydicom
    from pydicom.dataset import FileMetaDataset

    part10 = write_dicom(tmp_path / "part10.dcm", body_phantom())
    dataset = pydicom.dcmread(part10)
    if not little:  # pydicom writes pixel bytes as they are
        dataset.PixelData = dataset.pixel_array.astype(dataset.pixel_array.dtype.newbyteorder(">")).tobytes()
    dataset.file_meta, dataset.preamble = FileMetaDataset(), None
    bare = tmp_path / "bare"
    pydicom.dcmwrite(bare, dataset, implicit_vr=implicit, little_endian=little, enforce_file_format=False)
    assert not is_dicom(bare) and bare.read_bytes()[:2] in (b"\x08\x00", b"\x00\x08")
    decoded = read_any(bare)
    assert decoded.dicom and not decoded.colour
    np.testing.assert_array_equal(decoded.frames[0][1], read_any(part10).frames[0][1])


def test_an_image_under_a_dicom_name_is_told_by_its_first_bytes(tmp_path):
    """A JPEG or PNG saved as ``.dcm`` (or with no suffix) is read as the image it is; a truncated one, a PDF or a ZIP
    is named for what it is rather than called "not an image format vitroll reads"; so is an empty file."""
    pixels = np.zeros((8, 12, 3), np.uint8)
    pixels[:, 6:] = (200, 40, 40)
    Image.fromarray(pixels).save(tmp_path / "photo.dcm", format="JPEG", quality=95)
    Image.fromarray(pixels).save(tmp_path / "IMG0002", format="PNG")
    jpeg, png = read_any(tmp_path / "photo.dcm"), read_any(tmp_path / "IMG0002")
    assert not jpeg.dicom and jpeg.colour and jpeg.metadata["Modality"] == "unknown"
    with Image.open(tmp_path / "photo.dcm") as decoded_by_pillow:
        np.testing.assert_array_equal(jpeg.frames[0][1], np.asarray(decoded_by_pillow.convert("RGB")))
    np.testing.assert_array_equal(png.frames[0][1], pixels)
    (tmp_path / "cut.dcm").write_bytes((tmp_path / "photo.dcm").read_bytes()[:200])
    (tmp_path / "report.dcm").write_bytes(b"%PDF-1.7\n...")
    (tmp_path / "export.dcm").write_bytes(b"PK\x03\x04" + bytes(40))
    (tmp_path / "empty.dcm").write_bytes(b"")
    reasons = {}
    for name in ("cut.dcm", "report.dcm", "export.dcm", "empty.dcm"):
        with pytest.raises(ImageReadError) as caught:
            read_any(tmp_path / name)
        reasons[name] = caught.value.reason
    assert reasons["cut.dcm"].startswith("Its first bytes are those of a JPEG image, but it cannot be read as one: "
                                         "corrupt or truncated image data (")
    assert reasons["report.dcm"] == "This file is a PDF document (so its first bytes say), neither DICOM nor an image."
    assert reasons["export.dcm"] == "This file is a ZIP archive (so its first bytes say), neither DICOM nor an image."
    # it said "no 'DICM' marker after a 128-byte preamble, and no DICOM data set at its start"
    assert reasons["empty.dcm"] == "This file is empty (0 bytes), neither DICOM nor an image."


def test_16_bit_png_and_tiff_are_scaled_by_their_range(tmp_path):
    values = np.array([[0, 1000], [2000, 2000]], dtype=np.uint16)
    for suffix in (".png", ".tif"):
        path = tmp_path / f"x{suffix}"
        Image.fromarray(values).save(path)
        decoded = read_any(path)
        assert decoded.metadata["Modality"] == "unknown"
        np.testing.assert_array_equal(decoded.frames[0][1][..., 0], [[0, 128], [255, 255]])


def test_float_pixel_data_with_nan_and_inf_is_scaled_by_its_finite_range(tmp_path):
    values = np.array([[0.0, 1.0, np.nan], [2.0, np.inf, -np.inf]], dtype=np.float32)
    path = write_dicom(tmp_path / "f.dcm", values)
    np.testing.assert_array_equal(grey(path), [[0, 128, 0], [255, 255, 0]])  # finite range 0…2: 1 → 127.5


@pytest.mark.parametrize("width,level", [(0, 40), (-5, 40), (0.5, 40), ("", 40), (400, "")])
def test_an_unusable_file_window_counts_as_none(tmp_path, width, level):
    stored = np.array([[0, 25], [100, 100]], dtype=np.uint16)
    path = write_dicom(tmp_path / "w.dcm", stored, window=(width, level))
    np.testing.assert_array_equal(grey(path), [[0, 64], [255, 255]])  # min–max, as without a window


def test_a_small_width_is_kept_for_linear_exact_and_an_unknown_function_read_as_linear(tmp_path):
    stored = np.array([[0, 25], [100, 100]], dtype=np.uint16)
    exact = write_dicom(tmp_path / "e.dcm", stored, window=(0.5, 50), VOILUTFunction="LINEAR_EXACT")
    np.testing.assert_array_equal(grey(exact), [[0, 0], [255, 255]])  # a step at 50
    unknown = write_dicom(tmp_path / "u.dcm", stored, window=(400, 40), VOILUTFunction="CUBIC")
    np.testing.assert_array_equal(grey(unknown), grey(write_dicom(tmp_path / "l.dcm", stored, window=(400, 40))))


def test_only_whitelisted_metadata_leaves_the_reader(tmp_path):
    path = write_dicom(tmp_path / "a.dcm", body_phantom(), PatientAge="067Y", BurnedInAnnotation="YES")
    decoded = read_dicom(path)
    assert set(decoded.metadata) == {*SAFE_FIELDS, "age-band"}
    assert decoded.metadata["age-band"] == "60-69" and decoded.metadata["BurnedInAnnotation"] == "YES"
    text = repr(decoded.metadata)
    assert not any(phi in text for phi in PHI_STRINGS)
    assert safe_metadata(None)["Manufacturer"] == "unknown"
    assert decoded.identifiers["PatientID"] == FAKE_IDS["PatientID"]  # kept apart, for --keep-ids only


@pytest.mark.filterwarnings("ignore:Invalid value for VR CS")  # DOE^JOHN in a CS field, on purpose
def test_whitelisted_values_that_name_or_identify_the_patient_are_withheld(tmp_path):
    """A hand-typed scanner field may hold anything: a PN-style value, the patient's name or a part of it, or an ID of
    the same file is shown as (withheld); a modality that merely looks like a name prefix is kept."""
    path = write_dicom(tmp_path / "a.dcm", body_phantom(), Manufacturer=FAKE_IDS["PatientName"],
                       ManufacturerModelName=f"CT {FAKE_IDS['PatientID']} room 2", BodyPartExamined="DOE^JOHN",
                       OperatorsName="Tech^Lyrandor")
    assert read_dicom(path).metadata == {
        "Manufacturer": "(withheld)", "ManufacturerModelName": "(withheld)", "BodyPartExamined": "(withheld)",
        "Modality": "CT", "PatientSex": "F", "BurnedInAnnotation": "unknown", "age-band": "40-49"}
    part = write_dicom(tmp_path / "b.dcm", body_phantom(), Manufacturer="Zyxwuvt Medical",
                       ManufacturerModelName="Lyrandor 3", OperatorsName="Tech^Lyrandor")
    assert read_dicom(part).metadata["Manufacturer"] == "(withheld)"  # the family name alone
    assert read_dicom(part).metadata["ManufacturerModelName"] == "(withheld)"  # the operator's name
    prefix = write_dicom(tmp_path / "c.dcm", body_phantom(), PatientName="Doe^John^^Mr", Modality="MR",
                         Manufacturer="Zyxwuvtronics")
    assert read_dicom(prefix).metadata["Modality"] == "MR"
    assert read_dicom(prefix).metadata["Manufacturer"] == "Zyxwuvtronics"  # whole words only, and not the name here


def test_names_without_caret_in_any_name_element_or_sequence_and_in_descriptions_are_withheld(tmp_path):
    """Every person name (value representation PN, in sequences too) and runs of two words of a description count;
    a description's single word (CHEST) does not."""
    from pydicom.dataset import Dataset

    observer = Dataset()
    observer.VerifyingObserverName = "Quill Barnaby"
    cases = {
        "referring.dcm": (dict(ReferringPhysicianName="John Smith", BodyPartExamined="SMITH"), "BodyPartExamined"),
        "operator.dcm": (dict(OperatorsName="Jane Roe", ManufacturerModelName="Roe 5"), "ManufacturerModelName"),
        "observer.dcm": (dict(VerifyingObserverSequence=[observer], ManufacturerModelName="Barnaby 5"),
                         "ManufacturerModelName"),
        "description.dcm": (dict(StudyDescription="CT for DOE JOHN", BodyPartExamined="DOE JOHN"), "BodyPartExamined"),
        "comments.dcm": (dict(ImageComments="sent by Ulvana Teskor", Manufacturer="Ulvana Teskor"), "Manufacturer"),
    }
    for name, (tags, withheld) in cases.items():
        metadata = read_dicom(write_dicom(tmp_path / name, body_phantom(), **tags)).metadata
        assert metadata[withheld] == "(withheld)", name
        assert sum(value == "(withheld)" for value in metadata.values()) == 1, (name, metadata)
    chest = read_dicom(write_dicom(tmp_path / "chest.dcm", body_phantom(), StudyDescription="CHEST CT DOE JOHN"))
    assert chest.metadata["BodyPartExamined"] == "CHEST"


def test_a_name_with_accents_is_withheld_where_it_is_typed_without_them(tmp_path):
    """PatientName José^García (ISO_IR 100) and BodyPartExamined GARCIA, a CS value, which allows no accent: casefold
    keeps the accents, so GARCIA was shown beside a report that says it holds no names."""
    import pydicom
    import pydicom.data

    dataset = pydicom.dcmread(pydicom.data.get_testdata_file("CT_small.dcm"))
    dataset.SpecificCharacterSet = "ISO_IR 100"
    dataset.PatientName = "García^José"
    dataset.BodyPartExamined = "GARCIA"
    dataset.ManufacturerModelName = "JOSE 2"
    dataset.save_as(tmp_path / "accents.dcm")
    metadata = read_dicom(tmp_path / "accents.dcm").metadata
    assert (metadata["BodyPartExamined"], metadata["ManufacturerModelName"]) == ("(withheld)", "(withheld)")
    assert metadata["Manufacturer"] == "GE MEDICAL SYSTEMS" and metadata["Modality"] == "CT"


@pytest.mark.parametrize("element,value,field,typed", [
    # ø ł ı đ ð þ æ œ are letters of their own to Unicode, with no accent to drop
    ("PatientName", "Søren^Ødegård", "BodyPartExamined", "SOREN"),
    ("PatientName", "Wałęsa^Łukasz", "BodyPartExamined", "WALESA"),
    ("PatientName", "Yıldız^Ayşe", "BodyPartExamined", "YILDIZ"),
    ("PatientName", "Đorđević^Ana", "BodyPartExamined", "DORDEVIC"),
    ("PatientName", "Þórsdóttir^Guðrún", "BodyPartExamined", "GUDRUN"),
    ("PatientName", "Þórsdóttir^Guðrún", "BodyPartExamined", "THORSDOTTIR"),
    ("PatientName", "Bækgaard^Œdipe", "BodyPartExamined", "BAEKGAARD"),
    # ä ö ü ø å spelled out
    ("PatientName", "Müller^Jürgen", "BodyPartExamined", "MUELLER"),
    ("PatientName", "Jørgensen^Åse", "BodyPartExamined", "JOERGENSEN"),
    ("PatientName", "MUELLER^JUERGEN", "ManufacturerModelName", "Müller 2"),
    ("InstitutionName", "Universitätsklinikum Köln", "ManufacturerModelName", "UNIVERSITAETSKLINIKUM KOELN"),
    # vowel signs are marks, no word characters: राम was the words र and म, each shorter than MIN_WORD
    ("PatientName", "राम^शर्मा", "ManufacturerModelName", "राम 2"),
    ("PatientName", "முருகன்^ராஜா", "ManufacturerModelName", "முருகன் 2"),
    ("PatientName", "สมชาย^ศักดิ์ดี", "ManufacturerModelName", "ศักดิ์ดี 2"),
    # a name of words shorter than MIN_WORD, looked for whole
    ("PatientName", "Li^Na", "BodyPartExamined", "LI NA"),
    ("PatientName", "Wu^Yi^^Dr=吳^一", "ManufacturerModelName", "WU YI"),
])
def test_a_name_is_withheld_however_plain_ascii_or_its_script_spells_it(tmp_path, element, value, field, typed):
    """Each value was shown beside a header that names the patient (or the place) in another spelling: accents were
    dropped but not these letters' marks, German and Scandinavian names were not looked for spelled out, words of
    scripts with vowel signs were cut into pieces too short to be looked for, and so were names of short words."""
    import pydicom
    import pydicom.data

    dataset = pydicom.dcmread(pydicom.data.get_testdata_file("CT_small.dcm"))
    dataset.SpecificCharacterSet = "ISO_IR 192"
    setattr(dataset, element, value)
    setattr(dataset, field, typed)
    dataset.save_as(tmp_path / "spelled.dcm")
    metadata = read_dicom(tmp_path / "spelled.dcm").metadata
    assert metadata[field] == "(withheld)"
    assert metadata["Manufacturer"] == "GE MEDICAL SYSTEMS" and metadata["Modality"] == "CT"


def test_a_place_is_looked_for_whole_and_a_makers_own_site_withholds_nothing(tmp_path):
    """InstitutionName "General Hospital" no longer withholds a maker's "General"; the whole name still withholds;
    pydicom's MR_small.dcm (InstitutionName TOSHIBA, Manufacturer TOSHIBA_MEC) shows its maker."""
    import pydicom.data

    general = dict(InstitutionName="General Hospital", ManufacturerModelName="General Hospital CT")
    metadata = read_dicom(write_dicom(tmp_path / "a.dcm", body_phantom(), Manufacturer="GE Medical Systems General",
                                      **general)).metadata
    assert metadata["Manufacturer"] == "GE Medical Systems General"
    assert metadata["ManufacturerModelName"] == "(withheld)"
    assert read_dicom(pydicom.data.get_testdata_file("MR_small.dcm")).metadata == {
        "Manufacturer": "TOSHIBA_MEC", "ManufacturerModelName": "MRT50H1", "BodyPartExamined": "unknown",
        "Modality": "MR", "PatientSex": "F", "BurnedInAnnotation": "unknown", "age-band": "unknown"}
    assert read_dicom(pydicom.data.get_testdata_file("CT_small.dcm")).metadata["Manufacturer"] == "GE MEDICAL SYSTEMS"


def test_looking_for_identifiers_leaves_deferred_pixel_data_in_the_file(tmp_path):
    import pydicom

    path = write_dicom(tmp_path / "big.dcm", np.zeros((4, 256, 256), dtype=np.uint16))  # 512 KB of pixel data
    dataset = pydicom.dcmread(path, defer_size="256 KB")
    assert safe_metadata(dataset)["Manufacturer"] == "Acme Imaging"
    assert dataset.get_item(0x7FE00010, keep_deferred=True).value is None


@pytest.mark.parametrize("age, band", [("045Y", "40-49"), ("009Y", "0-9"), ("006M", "0-9"), ("003W", "0-9"),
                                       ("100Y", "90+"), ("090Y", "90+"), ("", "unknown"), (None, "unknown"),
                                       ("abc", "unknown"), ("45", "40-49")])
def test_age_band(age, band):
    assert age_band(age) == band


def test_salted_key_depends_on_the_salt():
    assert salted_key("a", "1.2.3") == salted_key("a", "1.2.3") != salted_key("b", "1.2.3")
    assert len(salted_key("a", "1.2.3")) == 12


def test_pydicom_bundled_test_files_if_present():
    import pydicom.data

    folder = Path(pydicom.data.__file__).parent / "test_files"
    names = ["CT_small.dcm", "MR_small.dcm", "SC_rgb_rle_2frame.dcm", "SC_ybr_full_422_uncompressed.dcm"]
    present = [folder / name for name in names if (folder / name).is_file()]
    if not present:
        pytest.skip("pydicom's bundled test files are not installed")
    for path in present:
        decoded = read_dicom(path)
        assert decoded.frames and all(rgb.dtype == np.uint8 and rgb.shape[2] == 3 for _, rgb in decoded.frames)
        assert decoded.frames[0][1].std() > 0
    if (folder / "SC_rgb_rle_2frame.dcm").is_file():
        assert len(read_dicom(folder / "SC_rgb_rle_2frame.dcm").frames) == 2


def test_pydicom_warnings_which_may_quote_identifiers_do_not_leave_the_reader(tmp_path, monkeypatch, recwarn):
    import pydicom.pixels

    decode = pydicom.pixels.iter_pixels

    def quoting_decoder(*args, **kwargs):
        import warnings

        warnings.warn(f"Invalid value for VR PN: '{FAKE_IDS['PatientName']}'", UserWarning)
        return decode(*args, **kwargs)

    monkeypatch.setattr(pydicom.pixels, "iter_pixels", quoting_decoder)
    decoded = read_dicom(write_dicom(tmp_path / "a.dcm", body_phantom()))
    assert len(decoded.frames) == 1
    assert not [str(warning.message) for warning in recwarn]


def test_counting_frames_of_a_file_with_an_invalid_number_of_frames_warns_nothing(tmp_path, recwarn):
    """NumberOfFrames '1A' (as in pydicom's badVR.dcm): pydicom warns, quoting the value, when it is converted; the
    count is 1 and nothing reaches the user (the warning went to stderr in the middle of an audit)."""
    path = write_dicom(tmp_path / "a.dcm", body_phantom())
    data = path.read_bytes()
    tag = b"\x28\x00\x08\x00IS"  # (0028,0008) NumberOfFrames, explicit VR little endian
    path.write_bytes(data.replace(b"\x28\x00\x10\x00US", tag + b"\x02\x001A\x28\x00\x10\x00US", 1))
    assert frame_count(path) == 1
    assert not [str(warning.message) for warning in recwarn]


def test_a_c_decoder_printing_to_stderr_leaves_only_the_reason(capfd):
    """OpenJPEG (inside GDCM) prints two lines to file descriptor 2 on this file; the reason is the one line left."""
    from pydicom.data import get_testdata_file

    with pytest.raises(ImageReadError) as caught:
        read_dicom(get_testdata_file("JPEG2000-embedded-sequence-delimiter.dcm"))
    assert caught.value.reason.startswith("The compressed pixel data cannot be decoded: every pydicom decoder for its "
                                          "transfer syntax, JPEG 2000")
    print("after decoding", file=sys.stderr)
    assert capfd.readouterr().err == "after decoding\n"  # nothing from the decoder; stderr works again afterwards


def test_files_decode_with_stderr_closed(tmp_path):
    """`vitroll audit … 2>&-`: with no descriptor 2 to silence (and sys.stderr None), decoding goes on as usual."""
    import subprocess

    path = write_dicom(tmp_path / "ct.dcm", body_phantom())
    script = f"from vitroll.io.dicom import read_dicom; print(read_dicom({str(path)!r}).frames[0][1].shape)"
    result = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.close(2))
    assert result.stdout == "(64, 64, 3)\n"


def test_a_missing_decoder_is_named_by_the_package_to_install(tmp_path):
    """Without the ``dicom`` extra's decoders, the reason says which command installs them and names python-gdcm by its
    name on PyPI (pydicom calls it ``gdcm``, and ``pip install gdcm`` does not install it)."""
    import subprocess

    from pydicom.data import get_testdata_file

    script = (
        "import sys\n"
        "for name in ('gdcm', 'pylibjpeg', 'openjpeg', 'rle', 'libjpeg'): sys.modules[name] = None\n"
        "from vitroll.errors import ImageReadError\n"
        "from vitroll.io.dicom import read_dicom\n"
        "for path in sys.argv[1:]:\n"
        "    try: read_dicom(path)\n"
        "    except ImageReadError as error: print(error.reason)\n")
    files = [get_testdata_file(name) for name in ("MR_small_jpeg_ls_lossless.dcm", "JPEG2000.dcm")]
    result = subprocess.run([sys.executable, "-c", script, *files], stdout=subprocess.PIPE, text=True, check=True)
    [jpeg_ls] = result.stdout.splitlines()  # Pillow, a dependency, reads the JPEG 2000 file
    assert jpeg_ls == (  # it quoted pydicom's list of every plugin and its requirements, then named each plugin again
        "The compressed pixel data cannot be decoded: no decoder for its transfer syntax, JPEG-LS Lossless Image "
        "Compression (UID 1.2.840.10008.1.2.4.80), is installed; pip install \"vitroll[dicom]\" installs one "
        "(python-gdcm).")


def test_a_decoder_only_a_package_vitroll_leaves_out_adds_is_named_with_its_licence():
    """A transfer syntax whose only plugin needs a package the ``dicom`` extra leaves out names the command that
    installs it and why vitroll does not."""
    from types import SimpleNamespace

    from vitroll.io.dicom.reading import _install_advice

    libjpeg = SimpleNamespace(missing_dependencies=["pylibjpeg - requires pylibjpeg>=2.0 and pylibjpeg-libjpeg>=2.1"])
    assert _install_advice(libjpeg) == ("pip install pylibjpeg pylibjpeg-libjpeg installs one (pylibjpeg-libjpeg is "
                                        "GPL-3.0, so vitroll does not install it)")
    unavailable = SimpleNamespace(missing_dependencies=["custom - plugin indicating it is unavailable"])
    assert _install_advice(unavailable) == "no package is known that adds one"


@pytest.mark.parametrize(("compressed", "cut"), [(False, -1), (False, 3), (True, 60), (False, None)],
                         ids=["inside-the-value-before-it", "inside-its-element-header", "inside-its-fragments",
                              "inside-the-file-meta"])
def test_a_file_cut_short_before_or_inside_its_pixel_data_says_so(tmp_path, compressed, cut):
    """pydicom stops silently at the end of a truncated file (and drops every element when the file ends inside
    encapsulated pixel data, an interrupted copy of a JPEG study); the reason said the image had no PixelData at
    all, as a structured report would, and now says the file is cut short (``cut`` bytes after the pixel data's tag)."""
    from pydicom.uid import JPEGBaseline8Bit

    options = {"transfer_syntax": JPEGBaseline8Bit, "pixel_bytes": b"\xff\xd8" + bytes(300)} if compressed else {}
    good = write_dicom(tmp_path / "good.dcm", body_phantom(dtype=np.uint8, high=255), **options).read_bytes()
    truncated = tmp_path / "truncated.dcm"
    truncated.write_bytes(good[:good.index(b"\xe0\x7f\x10\x00") + cut] if cut is not None else
                          good[:good.index(b"\x02\x00\x10\x00") + 12])  # inside the transfer syntax UID
    with pytest.raises(ImageReadError) as caught:
        read_dicom(truncated)
    assert caught.value.reason == ("This DICOM file (Secondary Capture Image Storage) is cut short: it ends in the "
                                   "middle of an element and no PixelData was read from it, so there is no image to "
                                   "explain.")
    complete = write_dicom(tmp_path / "nopixels.dcm", body_phantom(), with_pixels=False)
    with pytest.raises(ImageReadError) as caught:
        read_dicom(complete)
    assert caught.value.reason.endswith("has no PixelData, so there is no image to explain.")


@pytest.mark.parametrize("missing", [1, 500, 4000])
def test_a_file_cut_short_inside_native_pixel_data_says_so(tmp_path, missing):
    """A native image whose file ends inside its pixel data was called undecodable, quoting pydicom's guesses (a
    corrupt data set, a wrong group 0028 value or transfer syntax) and the advice that the data was damaged; it now
    says the file is cut short. A file cut short after its pixel data (in trailing padding) shows its whole image."""
    from pydicom.data import get_testdata_file

    original = Path(get_testdata_file("MR_small.dcm")).read_bytes()  # PixelData, then DataSetTrailingPadding
    padding_start = original.index(b"\xfc\xff\xfc\xff")
    truncated = tmp_path / "truncated.dcm"
    truncated.write_bytes(original[:padding_start - missing])
    with pytest.raises(ImageReadError) as caught:
        read_dicom(truncated)
    assert caught.value.reason == ("This DICOM file (MR Image Storage) is cut short: it ends in the middle of its "
                                   "pixel data, so the image is incomplete and is not shown.")
    truncated.write_bytes(original[:padding_start + 20])
    np.testing.assert_array_equal(read_dicom(truncated).frames[0][1],
                                  read_dicom(get_testdata_file("MR_small.dcm")).frames[0][1])


@pytest.mark.parametrize("name", ["MR_small_jp2klossless.dcm", "SC_rgb_jpeg_dcmtk.dcm", "SC_rgb_jpeg_gdcm.dcm",
                                  "MR_small_jpeg_ls_lossless.dcm", "MR_small_RLE.dcm"])
def test_a_compressed_frame_cut_short_is_never_shown_as_whole(tmp_path, name):
    """A JPEG 2000 file missing its last 1 % was thought to be a damaged image shown as whole: those bytes are its
    trailing padding, after the pixel data, whose image is whole. A frame's codestream cut short inside a well-formed
    file (its end-of-codestream marker, or an RLE segment's last bytes, lost) is refused by every installed decoder,
    for JPEG 2000, JPEG baseline and lossless, JPEG-LS and RLE alike."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.encaps import encapsulate, generate_frames

    original = Path(get_testdata_file(name)).read_bytes()
    whole = read_dicom(get_testdata_file(name)).frames[0][1]
    if name == "MR_small_jp2klossless.dcm":
        padding_lost = tmp_path / "padding_lost.dcm"
        padding_lost.write_bytes(original[:int(len(original) * .99) + 1])
        np.testing.assert_array_equal(read_dicom(padding_lost).frames[0][1], whole)
    dataset = pydicom.dcmread(get_testdata_file(name))
    frame = next(generate_frames(dataset.PixelData, number_of_frames=1)).rstrip(b"\0")
    for kept in (frame[:-2], frame[:len(frame) // 2]):
        dataset.PixelData = encapsulate([kept + bytes(len(kept) % 2)])
        dataset.save_as(tmp_path / "cut.dcm")
        with pytest.raises(ImageReadError) as caught:
            read_dicom(tmp_path / "cut.dcm")
        if frame.startswith(b"\xff\xd8"):  # told before any decoder reads on past its end
            kind = "JPEG-LS" if "JPEG-LS" in dataset.file_meta.TransferSyntaxUID.name else "JPEG"
            assert caught.value.reason == (f"The compressed pixel data cannot be decoded: its {kind} codestream ends "
                                           "without its end-of-image marker, so it is cut short; the image would be "
                                           "incomplete and is not shown.")
        else:
            assert caught.value.reason.startswith("The compressed pixel data cannot be decoded: ")
            assert f"for its transfer syntax, {dataset.file_meta.TransferSyntaxUID.name} " in caught.value.reason


def test_a_jpeg_ls_frame_without_its_end_marker_is_refused_whatever_was_decoded_before(tmp_path):
    """JPEG-LS missing its last 2 bytes (the EOI marker) was refused by GDCM alone in a fresh process, and shown as
    whole once examples_jpeg2k.dcm had been decoded before it: GDCM read on past the frame's end into freed memory,
    where an earlier copy of the frame's EOI could lie (so pytest -n 2 failed at random). Which frame of a multi-frame
    file is cut is named."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.encaps import encapsulate, generate_frames

    dataset = pydicom.dcmread(get_testdata_file("MR_small_jpeg_ls_lossless.dcm"))
    frame = next(generate_frames(dataset.PixelData, number_of_frames=1)).rstrip(b"\0")
    dataset.PixelData = encapsulate([frame, frame[:-2]])
    dataset.NumberOfFrames = 2
    dataset.save_as(tmp_path / "cut.dcm")
    read_dicom(get_testdata_file("examples_jpeg2k.dcm"))
    assert len(read_dicom(tmp_path / "cut.dcm", frame=0).frames) == 1
    for _ in range(3):
        with pytest.raises(ImageReadError) as caught:
            read_dicom(tmp_path / "cut.dcm")
        assert caught.value.reason == ("The compressed pixel data cannot be decoded: frame 1's JPEG-LS codestream ends "
                                       "without its end-of-image marker, so it is cut short; the image would be "
                                       "incomplete and is not shown.")


def test_an_empty_pixel_data_element_is_named_as_such(tmp_path):
    """A PixelData element of length 0 (blanked by a de-identifier) gave pydicom's "object of type 'NoneType' has no
    len()" and the advice that the pixel data was damaged."""
    import pydicom

    path = write_dicom(tmp_path / "blanked.dcm", body_phantom())
    dataset = pydicom.dcmread(path)
    dataset.PixelData = b""
    dataset.save_as(path)
    with pytest.raises(ImageReadError) as caught:
        read_dicom(path)
    assert caught.value.reason == ("This DICOM file (Secondary Capture Image Storage) has an empty PixelData element, "
                                   "so there is no image to explain.")


def test_a_frame_out_of_range_is_counted_in_words(tmp_path):
    single = write_dicom(tmp_path / "single.dcm", body_phantom())
    cine = write_dicom(tmp_path / "cine.dcm", np.stack([body_phantom()] * 3))
    reasons = []
    Image.fromarray(body_phantom(dtype=np.uint8, high=255)).save(tmp_path / "photo.png")
    for path in (single, cine, tmp_path / "photo.png"):  # the PNG's one image was audited as frame 5
        with pytest.raises(ImageReadError) as caught:
            read_any(path, frame=5)
        reasons.append(caught.value.reason)
    assert reasons == ["frame=5 is out of range: the file has 1 frame, numbered from 0.",  # was --frame 5 in Python
                       "frame=5 is out of range: the file has 3 frames, numbered from 0.",
                       "frame=5 is out of range: the file has 1 frame, numbered from 0."]
    with worded_for_the_command_line(), pytest.raises(ImageReadError) as caught:
        read_any(cine, frame=5)
    assert caught.value.reason == "--frame 5 is out of range: the file has 3 frames, numbered from 0."
    assert read_any(tmp_path / "photo.png", frame=0).frames[0][1].shape == (64, 64, 3)


def test_a_file_without_a_transfer_syntax_says_what_to_do():
    """pydicom's meta_missing_tsyntax.dcm: its row quoted pydicom's message and gave no way out."""
    from pydicom.data import get_testdata_file

    with pytest.raises(ImageReadError) as caught:
        read_any(get_testdata_file("meta_missing_tsyntax.dcm"))
    assert caught.value.reason == (
        "The pixel data cannot be decoded: the file's meta information states no transfer syntax (0002,0010), which "
        "says how the pixels are encoded; exporting it again from its source (the PACS or the scanner), uncompressed "
        "if offered, may give a readable file.")


def test_a_file_cut_inside_an_element_header_or_its_sop_class_is_cut_short_and_quotes_no_value(tmp_path):
    """pydicom's CT_small.dcm cut inside its group length's value (a ValueError out of read_dicom, 'Reading failed'
    in the audit; then 'not a readable DICOM file (Expected total bytes …)'), inside the header of its PixelData
    ('… (unpack requires a buffer of 4 bytes)') or inside its SOPClassUID ('This DICOM file (1.2.840.10) has no
    PixelData', the cut value quoted and the cut not seen)."""
    import pydicom
    from pydicom.data import get_testdata_file

    source = Path(get_testdata_file("CT_small.dcm")).read_bytes()
    dataset = pydicom.dcmread(get_testdata_file("CT_small.dcm"), defer_size=256)
    sop_class = dataset.get_item(0x00080016, keep_deferred=True).value_tell
    pixel_data = dataset.get_item(0x7FE00010, keep_deferred=True).value_tell - 12  # explicit VR OW: 12-byte header
    no_pixel_data = "is cut short: it ends in the middle of an element and no PixelData was read from it, so there " \
                    "is no image to explain."
    for end, stated in ((140, " (SOP class not stated)"), (142, ""), (pixel_data + 8, ""), (pixel_data + 10, ""),
                        (sop_class + 10, " (a SOP class that pydicom does not know)")):
        (tmp_path / "cut.dcm").write_bytes(source[:end])
        with pytest.raises(ImageReadError) as caught:
            read_any(tmp_path / "cut.dcm")
        assert caught.value.reason == f"This DICOM file{stated} {no_pixel_data}", end


def test_a_file_cut_inside_a_sequence_item_is_cut_short_not_one_that_cannot_be_opened(tmp_path):
    """pydicom's JPEG2000.dcm cut at byte 887, inside an item of a sequence: pydicom raises an OSError without errno
    ("No tag to read at file position …"), which was worded as the file system's refusal, "cannot be opened
    (OSError)"."""
    from pydicom.data import get_testdata_file

    (tmp_path / "cut.dcm").write_bytes(Path(get_testdata_file("JPEG2000.dcm")).read_bytes()[:887])
    with pytest.raises(ImageReadError) as caught:
        read_any(tmp_path / "cut.dcm")
    assert caught.value.reason == ("This DICOM file is cut short: it ends in the middle of an element and no PixelData "
                                   "was read from it, so there is no image to explain.")


def test_a_dicomdir_points_to_its_folder():
    """A DICOM medium's index is what an auditor finds on a CD; its row said that it 'has no PixelData', not where
    the images it lists are."""
    from pydicom.data import get_testdata_file

    with pytest.raises(ImageReadError) as caught:
        read_any(get_testdata_file("DICOMDIR"))
    assert caught.value.reason == ("This file is the directory of a DICOM medium (Media Storage Directory Storage), "
                                   "which holds no image itself; give the folder that holds it to audit the image "
                                   "files it lists.")
