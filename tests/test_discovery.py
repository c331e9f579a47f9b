"""``vitroll.io.discovery``: the one set of rules by which annotate, audit and evaluate find their input files."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitroll.errors import ImageReadError, VitrollError
from vitroll.io.discovery import (FoundFile, check_given_paths_exist, every_file, folder_files, given_files,
                                  has_image_suffix, listed_files, source_files)
from vitroll.pipelines.evaluate import folder_images
from vitroll.pipelines.inputs import discover

NAMES = ["b.png", "B.png", "a/z.png", "a.png", "é.png", "a-b.png", "a_b.png", "a/b/c.png", "notes.txt", "scan",
         "a/b/x.DCM", "c.JPG"]
CODE_POINT_ORDER = ["B.png", "a-b.png", "a.png", "a/b/c.png", "a/b/x.DCM", "a/z.png", "a_b.png", "b.png", "c.JPG",
                    "notes.txt", "scan", "é.png"]


def touch(folder: Path, names: list[str]) -> None:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")


def keys(found: list[FoundFile]) -> list[str]:
    return [file.key for file in found]


def test_folder_files_are_sorted_by_relative_path_in_code_point_order(tmp_path):
    touch(tmp_path, NAMES)
    found = folder_files(tmp_path)
    assert keys(found) == CODE_POINT_ORDER
    assert [file.path for file in found] == [tmp_path / key for key in CODE_POINT_ORDER]


@pytest.mark.skipif(shutil.which("find") is None, reason="needs find(1)")
def test_the_order_is_the_one_the_audit_report_tells_an_auditor_to_reproduce(tmp_path):
    touch(tmp_path, NAMES + [".hidden.png", ".cache/x.png"])
    listing = subprocess.run("find . -not -xtype d -not -path '*/.*' | LC_ALL=C sort", shell=True, cwd=tmp_path,
                             capture_output=True, check=True, env={**os.environ, "LC_ALL": "C"}).stdout
    assert [line.removeprefix(b"./").decode("utf-8") for line in listing.splitlines()] == CODE_POINT_ORDER
    assert [p.relative_to(tmp_path).as_posix() for p in given_files([tmp_path])] == CODE_POINT_ORDER


def test_the_predicate_decides_which_names_count_and_recursion_is_optional(tmp_path):
    touch(tmp_path, NAMES)
    assert keys(folder_files(tmp_path, accept=has_image_suffix)) == [
        "B.png", "a-b.png", "a.png", "a/b/c.png", "a/z.png", "a_b.png", "b.png", "c.JPG", "é.png"]
    assert keys(folder_files(tmp_path, accept=has_image_suffix, recursive=False)) == [
        "B.png", "a-b.png", "a.png", "a_b.png", "b.png", "c.JPG", "é.png"]
    assert keys(folder_files(tmp_path, accept=every_file, recursive=False)) == [
        "B.png", "a-b.png", "a.png", "a_b.png", "b.png", "c.JPG", "notes.txt", "scan", "é.png"]


def test_hidden_files_and_folders_are_skipped(tmp_path):
    touch(tmp_path, ["x.png", ".x.png", ".cache/y.png", "sub/.z.png", "sub/z.png", "sub/.git/config"])
    assert keys(folder_files(tmp_path)) == ["sub/z.png", "x.png"]
    assert [i.key for i in discover(tmp_path, recursive=True)] == ["sub/z.png", "x.png"]


def test_links_to_files_are_files_of_their_own_links_to_folders_are_not_followed(tmp_path):
    touch(tmp_path / "in", ["target.png"])
    touch(tmp_path / "elsewhere", ["far.png"])
    (tmp_path / "in" / "link.png").symlink_to("target.png")
    (tmp_path / "in" / "broken.png").symlink_to("nowhere.png")
    (tmp_path / "in" / "folder_link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    os.mkfifo(tmp_path / "in" / "pipe.png")  # reading it would block: never an input
    (tmp_path / "in" / "pipe_link.png").symlink_to("pipe.png")
    found = folder_files(tmp_path / "in")
    assert found == [FoundFile(tmp_path / "in" / "broken.png", "broken.png"),
                     FoundFile(tmp_path / "in" / "link.png", "link.png"),
                     FoundFile(tmp_path / "in" / "target.png", "target.png")]


def test_an_excluded_folder_contributes_nothing(tmp_path):
    touch(tmp_path, ["x.png", "out/overlays/x.png.png", "outer/y.png"])
    assert keys(folder_files(tmp_path, exclude=tmp_path / "out")) == ["outer/y.png", "x.png"]
    assert keys(folder_files(tmp_path, exclude=tmp_path)) == []


def deny_listing(monkeypatch, folders: set[Path]) -> None:
    """``os.scandir`` of ``folders`` fails as a folder without read permission does (tests may run as root)."""
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path) in folders:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_that_cannot_be_listed_is_named_not_left_out(tmp_path, monkeypatch):
    """os.walk skipped a sub-folder it could not list: its images were left out of the run without a word."""
    touch(tmp_path, ["x.png", "locked/y.png", "out/z.png"])
    denied = {tmp_path / "locked", tmp_path / "out"}
    deny_listing(monkeypatch, denied)
    with pytest.raises(ImageReadError) as unlisted:
        folder_files(tmp_path, exclude=tmp_path / "out")
    assert str(unlisted.value) == (f"{tmp_path / 'locked'}: cannot be listed (Permission denied), so its files would "
                                   "be left out; make it readable")
    assert keys(folder_files(tmp_path, recursive=False)) == ["x.png"]  # a sub-folder not searched does not matter
    denied.remove(tmp_path / "locked")
    assert keys(folder_files(tmp_path, exclude=tmp_path / "out")) == ["locked/y.png", "x.png"]  # nor the excluded
    denied.add(tmp_path)
    with pytest.raises(ImageReadError, match=r": cannot be listed \(Permission denied\)"):
        folder_files(tmp_path)


def test_list_files_keep_their_order_duplicates_and_any_suffix(tmp_path):
    lists = tmp_path / "lists"
    touch(lists, ["b.png"])
    absolute = str(tmp_path / "far" / "z.png")
    (lists / "inputs.csv").write_text(
        f"label,path\ncat,b.png\n# a comment\n\ndog,../a.png\nfish,{absolute}\ncat,sub/../b.png\nx,notes.txt\n",
        encoding="utf-8")
    assert listed_files(lists / "inputs.csv") == [
        FoundFile(lists / "b.png", "b.png"), FoundFile(tmp_path / "a.png", "../a.png"),
        FoundFile(Path(absolute), absolute), FoundFile(lists / "b.png", "b.png"),
        FoundFile(lists / "notes.txt", "notes.txt")]
    (lists / "plain.txt").write_text(f"{lists / 'b.png'}\nc.gif\n", encoding="utf-8")
    assert source_files(lists / "plain.txt") == [FoundFile(lists / "b.png", "b.png"),
                                                 FoundFile(lists / "c.gif", "c.gif")]


def test_a_text_list_names_files_whose_names_hold_commas_or_quotes(tmp_path):
    """A .txt list (as ``find . -name '*.png' > list.txt`` writes it) was read as CSV: ``Doe, J.png`` was the file
    ``Doe`` and ``"a" b.png`` the file ``a b.png``, both "no such file". A line that names a file as a whole is that
    file; other lines are still CSV (``x.png,label``), and a .csv file is CSV throughout."""
    for name in ("Doe, J.png", '"a" b.png', "x.png"):
        (tmp_path / name).write_bytes(b"")
    listing = tmp_path / "list.txt"
    listing.write_text('Doe, J.png\n"a" b.png\nx.png,cat\n')
    assert [file.key for file in listed_files(listing)] == ["Doe, J.png", '"a" b.png', "x.png"]
    listing.write_text('path,label\n"Doe, J.png",person\nx.png,cat\n')
    assert [file.key for file in listed_files(listing)] == ["Doe, J.png", "x.png"]
    table = tmp_path / "list.csv"
    table.write_text('"Doe, J.png",person\n"""a"" b.png",x\n')
    assert [file.key for file in listed_files(table)] == ["Doe, J.png", '"a" b.png']

def test_a_source_that_is_neither_a_folder_nor_a_list_is_one_clear_error(tmp_path):
    touch(tmp_path, ["x.png"])
    with pytest.raises(ImageReadError) as missing:
        source_files(tmp_path / "nope")
    assert str(missing.value) == f"{tmp_path / 'nope'}: no such folder or list file"
    with pytest.raises(ImageReadError) as image:
        source_files(tmp_path / "x.png")
    assert str(image.value) == f"{tmp_path / 'x.png'}: not a folder or a list file (.txt, .csv, .lst)"
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(VitrollError, match=r"bad\.txt: cannot read the list of inputs \(not UTF-8 text: byte 0xff"):
        listed_files(tmp_path / "bad.txt")


def test_given_files_keep_the_command_line_order_and_a_named_file_counts_whatever_its_name(tmp_path):
    touch(tmp_path, ["d1/b.dcm", "d1/a", "d2/c.png", ".hidden", "loose.txt"])
    assert given_files([tmp_path / "d2", tmp_path / ".hidden", tmp_path / "d1"], accept=has_image_suffix) == [
        tmp_path / "d2" / "c.png", tmp_path / ".hidden"]
    assert given_files([tmp_path / "loose.txt", tmp_path / "d1"]) == [
        tmp_path / "loose.txt", tmp_path / "d1" / "a", tmp_path / "d1" / "b.dcm"]
    with pytest.raises(VitrollError) as typo:
        given_files([tmp_path / "d1", tmp_path / "d3"])
    assert str(typo.value) == f"{tmp_path / 'd3'}: no such file or folder"


def test_given_files_keep_each_file_once_where_it_first_appears(tmp_path, monkeypatch):
    touch(tmp_path, ["d/a.png", "d/b.png"])
    (tmp_path / "link.png").symlink_to(tmp_path / "d" / "a.png")
    monkeypatch.chdir(tmp_path)
    found = given_files(["d/b.png", "d", "./d/b.png", "d/../d/a.png", "link.png"])
    assert found == [Path("d/b.png"), Path("d/a.png"), Path("link.png")]  # a link stays a file of its own


def test_given_files_skip_the_excluded_output_folder_inside_an_input_folder(tmp_path):
    touch(tmp_path, ["in/a.dcm", "in/audit/images/case-1.png", "in/audit/report.csv"])
    assert given_files([tmp_path / "in"], exclude=tmp_path / "in" / "audit") == [tmp_path / "in" / "a.dcm"]


def test_evaluate_finds_masks_by_name_even_when_the_name_looks_like_a_pattern(tmp_path):
    image = np.zeros((6, 6, 3), np.uint8)
    mask = np.zeros((6, 6), np.uint8)
    mask[1:3, 2:5] = 255
    for stem in ["cat[1]", ".hidden", "dog"]:
        Image.fromarray(image).save(tmp_path / f"{stem}.png")
        Image.fromarray(mask).save(tmp_path / f"{stem}_mask.png")
    Image.fromarray(np.zeros((6, 6), np.uint8)).save(tmp_path / "dog_mask.tif")  # the later of two masks by name
    Image.fromarray(image).save(tmp_path / "cat1_mask.png")  # what the pattern cat[1]_mask.* would have matched
    found = folder_images(tmp_path)
    assert [item.name for item in found] == ["cat[1].png", "dog.png"]
    assert [int(item.mask.sum()) for item in found] == [6, 6]


def deny_search(monkeypatch, folder: Path) -> None:
    """The status of anything under ``folder`` fails as under a folder without search (x) permission (tests may run
    as root, which chmod does not stop)."""
    real_stat, real_lstat = os.stat, os.lstat

    def refused(real):
        def status(path, *args, **kwargs):
            if Path(path).parent == folder:
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)
        return status

    monkeypatch.setattr(os, "stat", refused(real_stat))
    monkeypatch.setattr(os, "lstat", refused(real_lstat))


def test_a_path_inside_a_folder_without_search_permission_is_an_image_read_error(tmp_path, monkeypatch):
    """Path.is_dir and Path.exists raise a bare PermissionError under such a folder (Python 3.11): source_files,
    check_given_paths_exist and evaluate's folder raised it, a traceback on the command line."""
    touch(tmp_path, ["locked/photos/x.png", "locked/list.txt"])
    deny_search(monkeypatch, tmp_path / "locked")
    refused = "cannot be opened (Permission denied)"
    for call in (lambda: source_files(tmp_path / "locked" / "photos"),
                 lambda: check_given_paths_exist([tmp_path / "locked" / "list.txt"]),
                 lambda: folder_images(tmp_path / "locked" / "photos")):
        with pytest.raises(ImageReadError) as error:
            call()
        assert str(error.value).endswith(refused), error.value
    with pytest.raises(VitrollError, match="no such file or folder"):
        check_given_paths_exist([tmp_path / "missing.png"])
