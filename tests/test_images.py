"""Decoding odd and broken image files."""

from __future__ import annotations

import hashlib
import io
import warnings

import numpy as np
import pytest
from PIL import Image

from claimed_size import float_tiff_claiming_size, png_claiming_size
from vitroll import ImageReadError, load_image
from vitroll.io.images import load_mask
from vitroll.io.names import fit_name, utf8_name
from vitroll.io.writing import write_atomic


def save(tmp_path, name, image, **kwargs):
    path = tmp_path / name
    image.save(path, **kwargs)
    return path


def test_exif_rotation_is_applied(tmp_path):
    image = Image.new("RGB", (40, 20), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    path = save(tmp_path, "rotated.jpg", image, exif=exif)
    assert load_image(path).size == (20, 40)


@pytest.mark.parametrize("mode,suffix",
                         [("CMYK", "jpg"), ("P", "png"), ("RGBA", "png"), ("L", "png"), ("I;16", "png"), ("LA", "png")])
def test_modes_become_rgb(tmp_path, mode, suffix):
    source = Image.fromarray(np.random.default_rng(0).integers(0, 255, (12, 10, 3), dtype=np.uint8))
    image = (Image.fromarray((np.arange(120).reshape(12, 10) * 500).astype(np.uint16)) if mode == "I;16"
             else source.convert(mode))
    loaded = load_image(save(tmp_path, f"x.{suffix}", image))
    assert loaded.mode == "RGB" and loaded.size == (10, 12)
    if mode == "I;16":
        array = np.asarray(loaded)[..., 0]
        assert array.min() == 0 and array.max() == 255, "16-bit images are scaled by their range"


def test_float_tiff_with_nan_and_inf_is_scaled_by_its_finite_range(tmp_path):
    values = np.array([[1.0, 2.0, 3.0], [np.nan, np.inf, -np.inf]], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value" RuntimeWarning either
        loaded = np.asarray(load_image(save(tmp_path, "f.tif", Image.fromarray(values, mode="F"))))
    # finite range 1…3: 2 → 127.5 → 128; NaN and −inf → 0, +inf → 255
    np.testing.assert_array_equal(loaded[..., 0], [[0, 128, 255], [0, 255, 0]])


def test_wholly_non_finite_float_image_is_black_but_for_its_plus_inf_pixels(tmp_path):
    values = np.array([[np.nan, np.inf]], dtype=np.float32)
    loaded = np.asarray(load_image(save(tmp_path, "f.tif", Image.fromarray(values, mode="F"))))
    np.testing.assert_array_equal(loaded[..., 0], [[0, 255]])


def test_pillow_warnings_about_quirks_it_read_past_are_not_printed(tmp_path):
    exif = Image.Exif()
    exif[0x010E] = "x" * 200  # a description, stored after the IFD
    buffer = io.BytesIO()
    Image.new("RGB", (40, 20), (10, 200, 30)).save(buffer, "JPEG", exif=exif.tobytes())
    data = bytearray(buffer.getvalue())
    entry = data.index(b"\x01\x0e\x00\x02")  # the description's IFD entry (big-endian): point it past the end
    data[entry + 8:entry + 12] = b"\x00\x00\xff\xf0"
    (tmp_path / "bad_exif.jpg").write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_image(tmp_path / "bad_exif.jpg")
    assert [str(warning.message) for warning in caught] == []  # Pillow said "Truncated File Read" here
    assert loaded.mode == "RGB" and loaded.size == (40, 20)  # decoded (the damaged EXIF is skipped)


@pytest.mark.parametrize("suffix", ["gif", "tif", "webp"])
def test_a_file_of_several_frames_gives_its_first(tmp_path, suffix):
    frames = [Image.new("RGB", (20, 10), colour) for colour in [(255, 0, 0), (0, 0, 255)]]
    path = save(tmp_path, f"frames.{suffix}", frames[0], save_all=True, append_images=frames[1:], lossless=True)
    with Image.open(path) as image:
        assert image.n_frames == 2
    assert np.asarray(load_image(path)).reshape(-1, 3).tolist() == [[255, 0, 0]] * 200


def test_transparent_pixels_become_white(tmp_path):
    image = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    assert np.asarray(load_image(save(tmp_path, "clear.png", image)))[0, 0].tolist() == [255, 255, 255]


def test_broken_files_give_one_line_reasons(tmp_path):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    buffer = io.BytesIO()
    Image.new("RGB", (200, 200), (10, 200, 30)).save(buffer, format="JPEG")
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(buffer.getvalue()[:400])
    text = tmp_path / "notes.png"
    text.write_text("hello")
    cases = {empty: "empty file", truncated: "corrupt or truncated", text: "not an image",
             tmp_path / "gone.png": "no such file",
             tmp_path: "is a directory"}
    for path, reason in cases.items():
        with pytest.raises(ImageReadError) as info:
            load_image(path)
        message = str(info.value)
        assert message.startswith(str(path)) and reason in message and "\n" not in message


def test_an_image_over_the_limit_is_refused_from_its_header_naming_its_size_the_limit_and_the_flag(tmp_path):
    """A 144 MP photo was refused with Pillow's "could be decompression bomb DOS attack" text and no way to read it;
    the limit is vitroll's own (500 MP), checked before decoding (this file holds 8×8 pixels: decoding it would say
    truncated), and says how to raise it."""
    path = png_claiming_size(tmp_path / "pano.png", 30_000, 20_000)
    with pytest.raises(ImageReadError) as info:
        load_image(path)
    assert str(info.value) == (f"{path}: image too large: 600 MP (30000×20000), over the limit of 500 MP; "
                               "max_pixels=600_000_000 reads it if the memory allows (an overlay takes about 20 bytes "
                               "a pixel)")
    with pytest.raises(ImageReadError, match="0.04 MP .200×200., over the limit of 0.03 MP; max_pixels=1_000_000 "):
        load_image(save(tmp_path, "small.png", Image.new("RGB", (200, 200))), max_pixels=30_000)
    with pytest.raises(ImageReadError, match="corrupt or truncated"):  # decoded: no limit
        load_image(png_claiming_size(tmp_path / "claims.png", 400, 300), max_pixels=None)


def test_pillows_own_limit_neither_refuses_an_image_within_vitrolls_nor_is_left_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow raises past twice its limit
    path = save(tmp_path, "big.png", Image.new("RGB", (200, 100), (10, 20, 30)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_image(path).getpixel((199, 99)) == (10, 20, 30)
        assert load_image(path, max_pixels=None).size == (200, 100)
    assert Image.MAX_IMAGE_PIXELS == 1000


def test_a_masks_object_is_its_opaque_pixels_where_it_has_transparency_else_its_non_zero_ones(tmp_path):
    disk = np.zeros((6, 8), bool)
    disk[2:4, 3:6] = True
    white_on_clear = np.zeros((6, 8, 4), np.uint8)
    white_on_clear[disk] = 255
    black_on_clear = np.zeros((6, 8, 4), np.uint8)
    black_on_clear[disk, 3] = 255
    opaque = np.zeros((6, 8, 4), np.uint8)
    opaque[..., 3] = 255
    opaque[disk, 2] = 1  # the faintest blue is object too
    grey = disk.astype(np.uint8) * 255
    for name, array in [("white_on_clear", white_on_clear), ("black_on_clear", black_on_clear), ("opaque", opaque),
                        ("grey", grey)]:
        mask = load_mask(save(tmp_path, f"{name}.png", Image.fromarray(array)))
        assert mask.dtype == bool and np.array_equal(mask, disk), name
    with pytest.raises(ImageReadError, match="no such file"):
        load_mask(tmp_path / "gone.png")


def test_a_16_bit_or_float_masks_object_is_its_non_zero_pixels_not_its_stretched_grey_levels(tmp_path):
    """A 16-bit mask was stretched to its range before its non-zero pixels were taken: all 1 (the whole image) gave
    an empty mask, labels 1 and 2 lost label 1."""
    labels = np.array([[1, 2, 0], [2, 2, 0]], np.uint16)
    assert load_mask(save(tmp_path, "whole.png", Image.fromarray(np.ones((2, 3), np.uint16)))).all()
    assert load_mask(save(tmp_path, "labels.png", Image.fromarray(labels))).tolist() == [[True, True, False]] * 2
    values = np.array([[0.5, np.nan, 0.0]], np.float32)
    assert load_mask(save(tmp_path, "float.tif", Image.fromarray(values))).tolist() == [[True, False, False]]


def test_a_name_too_long_for_the_file_system_is_cut_at_a_character_with_a_hash_of_the_whole_name():
    assert fit_name("photo") == "photo"
    cut = fit_name("漢" * 100 + "a")
    assert len(cut.encode()) <= 255 and cut.startswith("漢" * 80) and cut == fit_name("漢" * 100 + "a")
    assert cut != fit_name("漢" * 100 + "b")
    assert fit_name("é" * 30, 20) == "ééé~f96161c7582c"


def test_a_name_with_a_lone_surrogate_not_from_the_file_system_is_spelt_and_hashed():
    # \ud800 is no byte kept by surrogateescape: a str path built in Python, not read from disk
    assert utf8_name("a\ud800") == "a\\ud800~" + hashlib.sha256(b"a\xed\xa0\x80").hexdigest()[:12]
    assert utf8_name("a\ud800") != utf8_name("a\udced\udca0\udc80")  # the same bytes, spelt as bytes
    assert utf8_name("caf\udce9") == "caf\\xe9~" + hashlib.sha256(b"caf\xe9").hexdigest()[:12]  # unchanged


def test_a_write_that_fails_names_the_file_asked_for_never_the_temporary_one(tmp_path):
    path = tmp_path / ("a" * 256)  # the file system refuses the name itself
    with pytest.raises(OSError) as raised:
        write_atomic(path, b"data")
    assert raised.value.filename == str(path) and "File name too long" in str(raised.value)
    assert list(tmp_path.iterdir()) == []
    write_atomic(tmp_path / ("b" * 250), b"data")  # its temporary name, 250 + '.PID.tmp', is cut to fit
    assert [p.name for p in tmp_path.iterdir()] == ["b" * 250]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_a_float_or_32_bit_rgb_tiff_pillow_cannot_read_is_read_stretched_to_its_range(tmp_path, dtype):
    """A float RGB TIFF (a scientific camera's, an HDR render's) failed as "not an image Pillow can read", while a float
    grey one was read: read by OpenCV, stretched to its finite range as the grey one is."""
    import cv2

    rgb = np.zeros((6, 8, 3), dtype)
    rgb[..., 0], rgb[:3, :, 1], rgb[0, 0] = 1, 4, (np.nan if dtype != np.int32 else 0, 4, 4)
    path = tmp_path / "scientific.tif"
    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]))
    pixels = np.asarray(load_image(path))
    assert pixels.shape == (6, 8, 3)
    assert pixels[3:, 1:].tolist() == [[[64, 0, 0]] * 7] * 3 and pixels[1, 1].tolist() == [64, 255, 0]


def test_a_float_rgb_tiff_over_the_limit_is_refused_from_its_header_before_opencv_decodes_it(
        tmp_path, monkeypatch, capfd):
    """OpenCV's fallback for TIFFs Pillow cannot read applied no max_pixels (only OpenCV's own 1 GP limit, which raised
    a cv2.error traceback under max_pixels=None), and printed libtiff's complaints about a file cut short."""
    import cv2

    path = float_tiff_claiming_size(tmp_path / "scan.tif", 30_000, 20_000)
    decoded, imread = [], cv2.imread
    monkeypatch.setattr(cv2, "imread", lambda *args: decoded.append(args) or imread(*args))
    with pytest.raises(ImageReadError) as info:
        load_image(path)
    assert str(info.value) == (f"{path}: image too large: 600 MP (30000×20000), over the limit of 500 MP; "
                               "max_pixels=600_000_000 reads it if the memory allows (an overlay takes about 20 bytes "
                               "a pixel)")
    assert decoded == []
    with pytest.raises(ImageReadError, match="scan.tif: not an image Pillow can read"):  # decoded: no limit
        load_image(path, max_pixels=None)
    assert len(decoded) == 1
    beyond_opencv = float_tiff_claiming_size(tmp_path / "beyond.tif", 40_000, 30_000)
    with pytest.raises(ImageReadError) as info:
        load_image(beyond_opencv, max_pixels=None)
    assert info.value.reason == ("image too large for OpenCV, which reads this TIFF's float or 32-bit colour pixels: "
                                 "1200 MP, over its limit of 1074 MP (the environment variable "
                                 "OPENCV_IO_MAX_IMAGE_PIXELS, set before vitroll starts, raises it)")
    assert capfd.readouterr().err == ""


def test_a_tiff_neither_pillow_nor_opencv_reads_is_one_line(tmp_path):
    path = tmp_path / "broken.tif"
    path.write_bytes(b"II*\x00" + bytes(64))
    with pytest.raises(ImageReadError, match=r"broken.tif: (not an image Pillow can read|corrupt)"):
        load_image(path)


def test_a_heic_photo_or_a_pdf_is_named_for_what_it_is_with_what_to_do(tmp_path):
    """Both said only "not an image Pillow can read": an iPhone's HEIC photo (whatever its name) reads as a broken
    file, a PDF scan as an image gone wrong."""
    heic = tmp_path / "IMG 0001.HEIC"
    heic.write_bytes(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + bytes(200))
    pdf = tmp_path / "scan.png"
    pdf.write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    with pytest.raises(ImageReadError) as info:
        load_image(heic)
    assert info.value.reason == ("a HEIC/HEIF photo (an iPhone's format), which Pillow does not read: save it as JPEG "
                                 "or PNG (on a Mac: sips -s format jpeg 'IMG 0001.HEIC' --out 'IMG 0001.jpg')")
    with pytest.raises(ImageReadError) as info:
        load_image(pdf)
    assert info.value.reason == "a PDF document (so its first bytes say), not an image"


@pytest.mark.parametrize("writer", ["tifffile", "opencv"])
def test_a_float_rgb_tiff_cut_short_is_the_one_line_of_other_truncated_images(tmp_path, writer, capfd):
    """Said "not an image Pillow can read", as if it were no image at all: Pillow has no mode for float RGB, and
    OpenCV's fallback read nothing from a file cut short. tifffile writes the directory before the pixels (the cut
    loses pixel data), OpenCV's libtiff after them (the cut loses the directory)."""
    import cv2

    tifffile = pytest.importorskip("tifffile") if writer == "tifffile" else None
    pixels = np.random.default_rng(0).random((64, 64, 3)).astype(np.float32)
    whole = tmp_path / "whole.tif"
    if tifffile is not None:
        tifffile.imwrite(whole, pixels, photometric="rgb")
    else:
        assert cv2.imwrite(str(whole), np.ascontiguousarray(pixels[..., ::-1]))
    assert load_image(whole).size == (64, 64)
    data = whole.read_bytes()
    cut = tmp_path / "cut.tif"
    cut.write_bytes(data[:30_000])
    with pytest.raises(ImageReadError) as info:
        load_image(cut)
    assert info.value.reason == ("corrupt or truncated image data (image file is truncated: " + (
        f"{len(data) - 30_000} bytes of its pixel data are missing)" if tifffile is not None else
        f"its first directory, at byte {int.from_bytes(data[4:8], 'little')}, lies past its end (30000 bytes))"))
    assert capfd.readouterr().err == ""


def test_opencvs_log_level_is_restored_when_the_last_of_nested_or_overlapping_decodes_is_done():
    """Each decode saved the level it found and put it back when done: an inner or overlapping decode (the explorer's
    threads, a data loader's) saved the silenced level, so the first one done unsilenced OpenCV while the other still
    decoded, and the last one left it silent for good."""
    import cv2

    from vitroll.io.images import _opencv_quiet

    silent, info = cv2.utils.logging.LOG_LEVEL_SILENT, cv2.utils.logging.LOG_LEVEL_INFO
    saved = cv2.utils.logging.getLogLevel()
    cv2.utils.logging.setLogLevel(info)
    try:
        with _opencv_quiet():
            with _opencv_quiet():
                assert cv2.utils.logging.getLogLevel() == silent
            assert cv2.utils.logging.getLogLevel() == silent
        assert cv2.utils.logging.getLogLevel() == info
        first, second = _opencv_quiet(), _opencv_quiet()  # two threads' decodes, the first done first
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert cv2.utils.logging.getLogLevel() == silent
        second.__exit__(None, None, None)
        assert cv2.utils.logging.getLogLevel() == info
    finally:
        cv2.utils.logging.setLogLevel(saved)


def in_a_folder_made_unreadable(monkeypatch, path):
    """Make ``path`` behave as a file in a folder made unreadable (chmod 000) does for a user who is not root: even
    its status cannot be read (root, running these tests, reads any folder)."""
    import errno
    import os

    stat = os.stat

    def refused(name, *args, **kwargs):
        if os.fspath(name) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(name))
        return stat(name, *args, **kwargs)

    monkeypatch.setattr(os, "stat", refused)


def test_an_image_in_a_folder_made_unreadable_is_an_image_read_error_not_a_permission_error(tmp_path, monkeypatch):
    """Path.exists, checking the file before it is opened, raised the PermissionError itself."""
    path = tmp_path / "sub" / "photo.png"
    path.parent.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    in_a_folder_made_unreadable(monkeypatch, path)
    with pytest.raises(ImageReadError) as raised:
        load_image(path)
    assert str(raised.value) == f"{path}: cannot be opened (Permission denied)"


def test_write_csv_writes_the_rows_under_the_first_rows_columns_and_a_name_that_is_not_utf8_spelt_readable(tmp_path):
    from vitroll.io.writing import write_csv

    path = tmp_path / "t.csv"
    write_csv(path, [{"image": "a\udcffb.png", "score": 0.5}, {"image": "c, d.png", "score": -1}])
    assert path.read_bytes() == b'image,score\r\na\\xffb.png,0.5\r\n"c, d.png",-1\r\n'
