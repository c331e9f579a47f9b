"""The annotate manifest matches its output folder: ``--limit``/``--overwrite`` replace only the rows they touch,
every input path (symbolic links included) is its own row, changed content is redone, and list entries outside
the list's folder get safe, reversible output names."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from manifest_check import assert_manifest_matches_folder
from vitroll.cli import main
from vitroll.pipelines.inputs import PARENT_MARK, ROOT_MARK, discover, output_name
from vitroll.pipelines.manifest import superseded_outputs


def image(path, seed: int, height: int = 40, width: int = 48, file_format: str = "PNG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format=file_format)


def annotate(capsys, *argv: str) -> tuple[int, str]:
    code = main(["annotate", *argv, "--batch-size", "2", "--workers", "0", "--no-progress"])
    return code, capsys.readouterr().out.strip()


@pytest.fixture
def five(tmp_path):
    for index in range(5):
        image(tmp_path / "in" / f"img{index}.png", seed=index)
    return tmp_path / "in"


def test_limit_and_overwrite_replace_only_the_rows_they_touch(five, tmp_path, capsys):
    out = tmp_path / "out"
    assert annotate(capsys, str(five), "--out", str(out))[1].startswith("5 ok, 0 failed, 0 skipped")
    before = assert_manifest_matches_folder(out)

    assert annotate(capsys, str(five), "--out", str(out), "--limit", "2")[1].startswith("0 ok, 0 failed, 2 skipped")
    assert assert_manifest_matches_folder(out) == before

    # redo the first two with other settings and only overlays: their heatmaps go, the other rows stay as they were
    code, line = annotate(capsys, str(five), "--out", str(out), "--overwrite", "--limit", "2", "--alpha", "0.7",
                          "--save", "overlay")
    assert code == 0 and line.startswith("2 ok, 0 failed, 0 skipped")
    after = assert_manifest_matches_folder(out)
    assert [row["path"] for row in after] == [f"img{index}.png" for index in range(5)]
    assert after[2:] == before[2:]
    for old, new in zip(before[:2], after[:2]):
        assert new["settings_hash"] != old["settings_hash"] and "heatmap" not in new
        assert new["overlay"] == old["overlay"] == f"overlays/{old['path']}.png"
    assert sorted(p.name for p in (out / "heatmaps").iterdir()) == ["img2.png.npy", "img3.png.npy", "img4.png.npy"]

    # an overwrite with the first settings again redoes all five and brings the heatmaps back
    code, line = annotate(capsys, str(five), "--out", str(out), "--overwrite")
    assert line.startswith("5 ok, 0 failed, 0 skipped")
    assert [row["settings_hash"] for row in assert_manifest_matches_folder(out)] == [before[0]["settings_hash"]] * 5


def test_a_symbolic_link_and_its_target_are_two_rows(tmp_path, capsys):
    source = tmp_path / "in"
    image(source / "target.png", seed=1)
    (source / "link.png").symlink_to("target.png")
    (source / "broken.png").symlink_to("nowhere.png")
    image(tmp_path / "elsewhere" / "deep.png", seed=2)
    (source / "folder_link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    out = tmp_path / "out"

    code, line = annotate(capsys, str(source), "--out", str(out), "--recursive")
    assert code == 3 and line.startswith("2 ok, 1 failed, 0 skipped")
    table = {row["path"]: row for row in assert_manifest_matches_folder(out)}
    assert sorted(table) == ["broken.png", "link.png", "target.png"]  # the folder link is not descended into
    assert table["broken.png"]["status"] == "error" and table["broken.png"]["error"].endswith(
        "broken.png: broken symbolic link (to nowhere.png, which does not exist)")
    assert table["link.png"]["overlay"] == "overlays/link.png.png"
    assert table["target.png"]["overlay"] == "overlays/target.png.png"
    same = ("size", "mtime_ns", "width", "height", "top1_index", "peak_x", "peak_y", "key_patches")
    assert [table["link.png"][k] for k in same] == [table["target.png"][k] for k in same]  # read through the link

    # re-pointed to another image, the link is redone (its content changed); the target is not
    image(source / "other.bmp", seed=3, height=24, width=30, file_format="BMP")
    (source / "link.png").unlink()
    (source / "link.png").symlink_to("other.bmp")
    code, line = annotate(capsys, str(source), "--out", str(out), "--recursive")
    assert line.startswith("2 ok, 1 failed, 1 skipped")
    table = {row["path"]: row for row in assert_manifest_matches_folder(out)}
    assert (table["link.png"]["width"], table["link.png"]["height"]) == (30, 24)
    assert table["link.png"]["size"] == (source / "other.bmp").stat().st_size


def test_changed_content_or_a_lost_output_is_redone_and_an_unreadable_file_loses_its_outputs(tmp_path, capsys):
    source = tmp_path / "in"
    for index in range(3):
        image(source / f"img{index}.bmp", seed=index, file_format="BMP")  # same size for the same shape
    out = tmp_path / "out"
    assert annotate(capsys, str(source), "--out", str(out), "--save", "overlay,heatmap,figure")[0] == 0
    first = {row["path"]: row for row in assert_manifest_matches_folder(out)}

    # the same number of bytes, other pixels: only the modification time tells
    changed = source / "img1.bmp"
    stamp = changed.stat()
    image(changed, seed=11, file_format="BMP")
    os.utime(changed, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000))
    assert changed.stat().st_size == stamp.st_size
    code, line = annotate(capsys, str(source), "--out", str(out), "--save", "overlay,heatmap,figure")
    assert line.startswith("1 ok, 0 failed, 2 skipped")
    second = {row["path"]: row for row in assert_manifest_matches_folder(out)}
    assert second["img1.bmp"]["mtime_ns"] == stamp.st_mtime_ns + 1_000_000
    assert second["img1.bmp"]["key_patches"] != first["img1.bmp"]["key_patches"]
    assert second["img0.bmp"] == first["img0.bmp"] and second["img2.bmp"] == first["img2.bmp"]

    # now unreadable: an error row replaces the ok one, and its three outputs are removed with it
    changed.write_bytes(b"not an image any more")
    code, line = annotate(capsys, str(source), "--out", str(out), "--save", "overlay,heatmap,figure")
    assert code == 3 and line.startswith("0 ok, 1 failed, 2 skipped")
    third = {row["path"]: row for row in assert_manifest_matches_folder(out)}
    assert third["img1.bmp"]["status"] == "error" and third["img1.bmp"]["size"] == 21
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["img0.bmp.png", "img2.bmp.png"]

    # an output deleted by hand is made again, and only its input is redone
    (out / "heatmaps" / "img2.bmp.npy").unlink()
    code, line = annotate(capsys, str(source), "--out", str(out), "--save", "overlay,heatmap,figure")
    assert line.startswith("1 ok, 1 failed, 1 skipped")
    assert assert_manifest_matches_folder(out)[2]["heatmap"] == "heatmaps/img2.bmp.npy"


def test_list_entries_outside_the_list_folder_get_safe_reversible_outputs(tmp_path, capsys):
    lists = tmp_path / "lists"
    image(lists / "inside.png", seed=1)
    image(lists / "@up" / "x.png", seed=2)  # an honest folder that looks like the mark for ".."
    image(tmp_path / "x.png", seed=3)
    image(tmp_path / "other" / "y.png", seed=4)
    absolute = (tmp_path / "other" / "y.png").as_posix()
    listing = lists / "inputs.txt"
    listing.write_text("\n".join(["inside.png", "@up/x.png", "../x.png", absolute, "sub/../inside.png",
                                  "../lists/inside.png", str(lists / "inside.png")]) + "\n")
    out = tmp_path / "out"

    code, line = annotate(capsys, str(listing), "--out", str(out))
    assert code == 0 and line.startswith("4 ok, 0 failed, 0 skipped")  # inside.png, listed four ways, is one input
    rows = assert_manifest_matches_folder(out)
    files = {"../x.png": tmp_path / "x.png", "@up/x.png": lists / "@up" / "x.png", "inside.png": lists / "inside.png",
             absolute: tmp_path / "other" / "y.png"}
    assert [row["path"] for row in rows] == sorted(files)
    assert {row["path"]: row["overlay"] for row in rows} == {
        "../x.png": "overlays/@up/x.png.png",
        "@up/x.png": "overlays/@@up/x.png.png",
        "inside.png": "overlays/inside.png.png",
        absolute: f"overlays/{ROOT_MARK}{absolute}.png",
    }
    for row in rows:
        assert os.path.samefile(lists / row["path"], files[row["path"]])  # the key joined to the list's folder
        assert out.resolve() in (out / row["overlay"]).resolve().parents and ".." not in row["overlay"].split("/")
    assert [item.key for item in discover(listing, limit=2)] == sorted(files)[:2]


def test_only_names_inside_the_output_folder_are_ever_removed():
    replaced = {"path": "a.png", "overlay": "../../victim.png", "heatmap": "/etc/victim", "figure": "figures/a.png.png"}
    latest = {"path": "a.png", "overlay": "overlays/a.png.png"}
    assert superseded_outputs([replaced, latest]) == {"figures/a.png.png"}


# normalised keys, as discover makes them: relative (maybe led by ".."), or absolute without ".."
names = st.text(alphabet="a@.x-", min_size=1, max_size=5).filter(lambda name: name not in (".", ".."))
keys = st.one_of(
    st.tuples(st.integers(0, 3), st.lists(names, min_size=1, max_size=4)).map(
        lambda case: "/".join([".."] * case[0] + case[1])),
    st.lists(names, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts)),
)


def input_key(name: str) -> str:
    """The README's rule read backwards: ``@root`` first is the root, ``@up`` is ``..``, one ``@`` is dropped."""
    return "/".join("" if index == 0 and part == ROOT_MARK else ".." if part == PARENT_MARK
                    else part[1:] if part.startswith("@") else part
                    for index, part in enumerate(name.split("/")))


@settings(deadline=None)  # a deadline fails under load: examples run seconds apart on shared cores
@given(st.lists(keys, unique=True, max_size=8))
def test_output_names_are_safe_and_reversible(batch):
    names = [output_name(key) for key in batch]
    assert len(set(names)) == len(batch)
    for key, name in zip(batch, names):
        assert input_key(name) == key
        assert not name.startswith("/") and not {"", ".", ".."} & set(name.split("/"))
        assert posixpath.normpath(posixpath.join("/out/overlays", name)).startswith("/out/overlays/")


def test_rows_of_an_interrupted_sharded_run_never_outrank_newer_ones(tmp_path, capsys):
    source = tmp_path / "in"
    source.mkdir()
    (source / "img0.png").write_bytes(b"garbage")
    image(source / "img1.png", seed=1)
    out = tmp_path / "out"
    assert annotate(capsys, str(source), "--out", str(out))[0] == 3
    # as an interrupted two-rank run leaves it: img0's error row in rank 1's shard, no merged manifest
    (out / "manifest.jsonl").rename(out / "manifest.rank1.jsonl")
    (out / "manifest.csv").unlink()
    image(source / "img0.png", seed=0)
    code, line = annotate(capsys, str(source), "--out", str(out))
    assert code == 0 and line.startswith("1 ok, 0 failed, 1 skipped")
    rows = assert_manifest_matches_folder(out)
    assert [(row["path"], row["status"]) for row in rows] == [("img0.png", "ok"), ("img1.png", "ok")]
    assert not list(out.glob("manifest.rank*.jsonl"))


def test_a_folder_of_a_vitroll_that_recorded_no_settings_asks_for_one_overwrite_then_resumes(five, tmp_path, capsys):
    out = tmp_path / "out"
    assert annotate(capsys, str(five), "--out", str(out))[0] == 0
    (out / "settings.json").unlink()
    assert annotate(capsys, str(five), "--out", str(out))[1].startswith("0 ok, 0 failed, 5 skipped")  # same hash
    (out / "settings.json").unlink()
    old = (out / "manifest.jsonl").read_text()
    current_hash = assert_manifest_matches_folder(out)[0]["settings_hash"]
    (out / "manifest.jsonl").write_text(old.replace(current_hash, "0123456789abcdef"))  # an older vitroll's hash

    assert main(["annotate", str(five), "--out", str(out), "--workers", "0", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {out}: its outputs were made by an older vitroll, which recorded no settings.json to tell "
        "whether they match these settings; add --overwrite once to redo these inputs (later runs resume), or "
        "choose another --out\n")
    assert annotate(capsys, str(five), "--out", str(out), "--overwrite", "--limit", "2")[0] == 0
    assert annotate(capsys, str(five), "--out", str(out))[1].startswith("3 ok, 0 failed, 2 skipped")


def test_annotate_fsyncs_its_manifest_off_the_main_thread_and_every_row_is_synced_when_it_ends(five, tmp_path, capsys,
                                                                                              monkeypatch):
    """The main thread feeds the model: it writes and flushes each batch's rows (a killed process keeps them) but
    no longer waits in fsync (5 to 35 ms a batch); the run still ends with every row fsync'ed."""
    import threading

    from vitroll.pipelines import manifest

    synced: list[tuple[bool, int]] = []  # (on the main thread, bytes of manifest.jsonl then)
    real = os.fsync

    def recording(descriptor: int) -> None:
        synced.append((threading.current_thread() is threading.main_thread(), os.fstat(descriptor).st_size))
        real(descriptor)

    monkeypatch.setattr(manifest.os, "fsync", recording)
    out = tmp_path / "out"
    code, printed = annotate(capsys, str(five), "--out", str(out))
    monkeypatch.undo()
    assert code == 0 and "5 ok" in printed
    assert [on_main for on_main, _ in synced] == [False] * 3  # batches of 2, 2 and 1
    rows_synced = [size for _, size in synced]
    assert rows_synced == sorted(rows_synced) and len(set(rows_synced)) == 3
    assert rows_synced[-1] == (out / "manifest.jsonl").stat().st_size  # compacted: the same rows, sorted


def test_a_manifest_fsync_that_fails_is_raised_by_the_next_append_or_close_as_one_line(tmp_path, monkeypatch):
    import errno

    from vitroll.errors import VitrollError
    from vitroll.pipelines import manifest

    def full_disk(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    message = (f"{tmp_path / 'manifest.jsonl'}: cannot write the manifest (No space left on device); the next run "
               "redoes the inputs whose rows are missing")
    for then in ("append", "close"):
        writer = manifest.ManifestWriter(tmp_path / "manifest.jsonl")
        monkeypatch.setattr(manifest.os, "fsync", full_disk)
        writer.append([{"path": "a.png"}])  # written and flushed: a killed process keeps the row
        assert (tmp_path / "manifest.jsonl").read_text() == '{"path": "a.png"}\n' * (1 + (then == "close"))
        with pytest.raises(VitrollError) as raised:
            if then == "append":
                writer.append([{"path": "b.png"}])
            else:
                writer.close()
        assert str(raised.value) == message
        monkeypatch.undo()
        writer.close()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device every write to fails with ENOSPC")
def test_a_full_disk_is_one_line_naming_the_manifest_when_it_is_closed_too():
    """On a real full disk (a 400 KiB tmpfs) annotate ended in 'vitroll: error: No space left on device', naming no
    file: the append that failed was told as one line, but its rows stayed in the file's buffer, and closing the file
    flushed them again outside that wording, the bare OSError replacing the line. /dev/full fails the same way."""
    from vitroll.errors import VitrollError
    from vitroll.pipelines import manifest

    message = ("/dev/full: cannot write the manifest (No space left on device); the next run redoes the inputs whose "
               "rows are missing")
    writer = manifest.ManifestWriter(Path("/dev/full"))
    with pytest.raises(VitrollError) as appended:
        writer.append([{"path": "a.png"}])
    assert str(appended.value) == message
    with pytest.raises(VitrollError) as closed:
        writer.close()
    assert str(closed.value) == message and writer._handle.closed
