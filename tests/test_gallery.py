"""The annotate gallery: the page's rows and class summary against the manifest, and the page in a real browser
(Debian's Chromium through Playwright) sorting, filtering, paging and loading every image."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import matplotlib
import numpy as np
import pytest
from PIL import Image

from browser import browser_page
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import AnnotateOptions, annotate
from vitroll.pipelines.gallery import PAGE_SIZE, class_summary, write_gallery
from vitroll.pipelines.manifest import read_rows
from vitroll.testbed.model import load_testbed_model
from vitroll.testbed.shapes import samples

ODD_NAME = "odd <b>name & #1 50%?.png"


def page_rows(out_dir: Path) -> list[dict]:
    text = (out_dir / "gallery" / "rows.js").read_text()
    prefix = "window.VITROLL_ROWS = "
    assert text.startswith(prefix) and text.rstrip().endswith(";")
    return json.loads(text[len(prefix):].rstrip().rstrip(";"))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("in")
    for index, sample in enumerate(samples(5, 8)):
        Image.fromarray(sample.image).save(source / f"shape_{index}.png")
    shutil.copy(source / "shape_0.png", source / ODD_NAME)
    (source / "broken.png").write_bytes(b"not a png")
    out_dir = source.parent / "out"
    annotate(source, out_dir, load_testbed_model(), ExplainSettings(method="rollout"), identity={"model": "shapes"})
    return out_dir


def legend_stops(html: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions (n,) in [0, 1] and RGB colours (n, 3) of the first colour bar on a page."""
    gradient = re.search(r"linear-gradient\(to right, ([^)]*)\)", html).group(1)
    stops = [stop.split() for stop in gradient.split(", ")]
    positions = np.array([float(position.rstrip("%")) / 100 for _, position in stops])
    colours = np.array([[int(colour[i:i + 2], 16) for i in (1, 3, 5)] for colour, _ in stops])
    return positions, colours


def test_the_gallery_legend_is_the_runs_colormap_and_says_how_each_map_was_scaled(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    Image.fromarray(next(samples(5, 1)).image).save(source / "a.png")
    annotate(source, tmp_path / "out", load_testbed_model(),
             ExplainSettings(method="rollout", cmap="viridis", normalization="percentile"), identity={"model": "s"})
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count('class="vitroll-legend"') == 1 and "each card names its own" not in html
    assert ("colormap <b>viridis</b>; each map scaled on its own: its 1st percentile and below at the low end, its "
            "99th percentile and above at the high end: colours compare places within one image") in html
    positions, colours = legend_stops(html)
    assert len(positions) == 256 and positions[0] == 0 and positions[-1] == 1
    expected = matplotlib.colormaps["viridis"](positions)[:, :3] * 255  # the bar is the overlay's 256-colour table
    assert np.abs(colours - expected).max() <= 0.5 + 1e-9

    write_gallery(tmp_path / "default", [])
    html = (tmp_path / "default" / "index.html").read_text()
    assert ("colormap <b>jet</b>; each map scaled on its own: its lowest value at the low end, its highest at the high "
            "end") in html
    positions, colours = legend_stops(html)
    assert np.abs(colours - matplotlib.colormaps["jet"](positions)[:, :3] * 255).max() <= 0.5 + 1e-9


def test_overlays_kept_from_a_run_with_another_colormap_show_their_own_legend(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for index, sample in enumerate(samples(5, 3)):
        Image.fromarray(sample.image).save(source / f"s{index}.png")
    out_dir, model = tmp_path / "out", load_testbed_model()
    annotate(source, out_dir, model, ExplainSettings(), identity={"model": "s", "cmap": "jet"})
    annotate(source, out_dir, model, ExplainSettings(cmap="viridis", normalization="percentile"),
             identity={"model": "s", "cmap": "viridis"}, options=AnnotateOptions(resume=False, limit=1))
    rows = {row["path"]: row for row in page_rows(out_dir)}
    html = (out_dir / "index.html").read_text()
    assert html.count('class="vitroll-legend"') == 2 and "each card names its own" in html
    assert re.findall(r"colormap <b>(\w+)</b>; each map scaled on its own: its (\w+)", html) == [
        ("jet", "lowest"), ("viridis", "1st")]  # the page said viridis for the two jet overlays kept
    assert {path: row["legend"] for path, row in rows.items()} == {"s0.png": 1, "s1.png": 0, "s2.png": 0}
    with browser_page((out_dir / "index.html").as_uri(), {"width": 1000, "height": 900}) as (page, errors):
        colours = page.eval_on_selector_all(".card", "cards => cards.map(card => card.innerText.split('colours: ')[1])")
        assert colours == ["legend 2, viridis", "legend 1, jet", "legend 1, jet"]
        page.click(".card.ok >> nth=1")
        assert page.inner_text("#detail .vitroll-legend").startswith("low\nhigh\ncolormap jet; each map scaled")
        assert not errors


def test_annotate_writes_a_gallery_whose_rows_and_class_summary_are_the_manifest(run):
    manifest = sorted(read_rows(run / "manifest.jsonl"), key=lambda row: row["path"])
    rows = page_rows(run)
    assert [row["path"] for row in rows] == [row["path"] for row in manifest] and len(rows) == 10
    for shown, written in zip(rows, manifest):
        assert shown["status"] == written["status"]
        if written["status"] == "ok":
            assert unquote(shown["overlay"]) == written["overlay"] and (run / written["overlay"]).is_file()
            assert shown["entropy"] == pytest.approx(written["entropy"])
    assert [row["error"] for row in rows if row["status"] != "ok"] == [next(
        row["error"] for row in manifest if row["path"] == "broken.png")]
    summary = {each["name"]: each for each in class_summary(manifest)}
    ok = [row for row in manifest if row["status"] == "ok"]
    assert {name: each["count"] for name, each in summary.items()} == {
        name: sum(row["top1_name"] == name for row in ok) for name in {row["top1_name"] for row in ok}}
    for name, each in summary.items():
        members = [row for row in ok if row["top1_name"] == name]
        assert each["entropy"] == pytest.approx(np.mean([row["entropy"] for row in members]))
        assert max(each["entropy_histogram"]) == 1.0 and max(each["peak_histogram"]) == 1.0
    page = (run / "index.html").read_text()
    assert "<b>name" not in page and all(f"<td><bdi>{name}</bdi></td>" in page for name in summary)


def test_non_finite_numbers_reach_the_page_as_null(tmp_path):
    write_gallery(tmp_path, [{"path": "a.png", "status": "ok", "entropy": float("nan"), "top1_name": "x",
                              "top1_probability": 0.5, "width": 10, "height": 10, "peak_x": 9, "peak_y": 0}])
    assert page_rows(tmp_path)[0]["entropy"] is None
    assert class_summary([{"status": "ok", "top1_name": "x", "entropy": 0.3, "width": 10, "height": 10,
                           "peak_x": 9, "peak_y": 0}])[0]["peak_histogram"][4] == 1.0  # top-right cell


def test_output_paths_reach_the_page_as_percent_encoded_urls(tmp_path):
    write_gallery(tmp_path, [{"path": "a #1 50%?.png", "status": "ok", "overlay": "overlays/a #1 50%?.png.png",
                              "heatmap": "heatmaps/a #1 50%?.png.npy", "figure": None}])
    row = page_rows(tmp_path)[0]
    assert row["overlay"] == "overlays/a%20%231%2050%25%3F.png.png"
    assert row["heatmap"] == "heatmaps/a%20%231%2050%25%3F.png.npy" and row["figure"] is None
    assert row["path"] == "a #1 50%?.png"  # shown as text, as it is


def test_a_name_that_is_not_utf8_is_shown_with_its_bytes_spelt_out(tmp_path):
    """Python keeps a Latin-1 ``café.png``'s byte as a lone surrogate, which a page shows as "�": spelt ``\\xe9`` as
    in its output's name (the manifest keeps the surrogate, so the bytes stay known)."""
    latin1 = "caf\udce9.png"
    write_gallery(tmp_path, [{"path": latin1, "status": "error", "error": f"{latin1}: not an image Pillow can read"},
                             {"path": latin1 + "2", "status": "ok", "top1_name": "r\udcf4le", "overlay": None}])
    shown = page_rows(tmp_path)
    assert [row["path"] for row in shown] == ["caf\\xe9.png", "caf\\xe9.png2"]
    assert shown[0]["error"] == "caf\\xe9.png: not an image Pillow can read" and shown[1]["top1_name"] == "r\\xf4le"
    assert "<td><bdi>r\\xf4le</bdi></td>" in (tmp_path / "index.html").read_text(encoding="utf-8")  # per class


def shown_paths(page) -> list[str]:
    return page.eval_on_selector_all(".card", "cards => cards.map(card => card.dataset.path)")


def test_the_gallery_shows_names_with_their_white_space_in_a_real_browser(tmp_path):
    names = ["  two leading spaces.png", "new\nline.png", "tab\tand  two.png"]
    write_gallery(tmp_path, [{"path": name, "status": "error", "error": f"{name}: empty file (0 bytes)"}
                             for name in names])
    with browser_page((tmp_path / "index.html").as_uri(), {"width": 1200, "height": 900}) as (page, errors):
        shown = page.eval_on_selector_all(".card .name", "names => names.map(name => name.innerText)")
        assert shown == names and not errors  # were "two leading spaces.png", "new line.png", "tab and two.png"


def test_the_gallery_sorts_filters_pages_and_loads_every_image_in_a_real_browser(run, tmp_path):
    big = tmp_path / "big"
    shutil.copytree(run, big)
    rows = read_rows(run / "manifest.jsonl")
    ok = [row for row in rows if row["status"] == "ok"]
    many = rows + [{**ok[index % len(ok)], "path": f"copy_{index:03d}.png", "entropy": index / 1000}
                   for index in range(PAGE_SIZE + 10)]
    write_gallery(big, many)
    expected = sorted(rows, key=lambda row: row["path"])
    with browser_page((run / "index.html").as_uri(), {"width": 1200, "height": 900}) as (page, errors):
        assert shown_paths(page) == [row["path"] for row in expected]
        page.wait_for_function("[...document.images].every(image => image.complete)")
        widths = page.eval_on_selector_all(".card img", "images => images.map(image => image.naturalWidth)")
        assert len(widths) == sum(row["status"] == "ok" for row in rows) and min(widths) > 0
        assert ODD_NAME in shown_paths(page)  # shown as text, not markup

        page.select_option("#sort", "entropy")
        page.check("#descending")
        by_entropy = [row["path"] for row in sorted((row for row in rows if row["status"] == "ok"),
                                                    key=lambda row: -row["entropy"])]
        assert shown_paths(page)[:len(by_entropy)] == by_entropy
        page.select_option("#status", "error")
        assert shown_paths(page) == ["broken.png"]
        page.select_option("#status", "")
        some_class = ok[0]["top1_name"]
        page.select_option("#class", some_class)
        assert sorted(shown_paths(page)) == sorted(row["path"] for row in ok if row["top1_name"] == some_class)
        page.select_option("#class", "")
        page.fill("#search", "shape_3")
        assert shown_paths(page) == ["shape_3.png"]
        page.click(".card.ok")
        assert page.eval_on_selector("#detail", "dialog => dialog.open")
        page.wait_for_function("document.querySelector('#detail img').complete")
        assert page.eval_on_selector("#detail img", "image => image.naturalWidth") > 0
        page.screenshot(path=str(tmp_path / "gallery.png"))

        page.goto((big / "index.html").as_uri())
        assert len(shown_paths(page)) == PAGE_SIZE and page.inner_text("#page").strip() == "page 1 / 2"
        page.click("#next")
        assert len(shown_paths(page)) == len(many) - PAGE_SIZE
        assert not errors


def test_a_keyboard_alone_opens_an_images_details_and_every_control_has_a_name(run):
    with browser_page((run / "index.html").as_uri(), {"width": 1200, "height": 900}) as (page, errors):
        for _ in range(30):  # the controls, then the cards, in the page's order
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.classList.contains('card')"):
                break
        focused = page.evaluate("document.activeElement.dataset.path")
        first_ok = page.eval_on_selector(".card.ok", "card => card.dataset.path")
        assert focused == first_ok and page.evaluate("document.activeElement.getAttribute('role')") == (
            "button")
        page.keyboard.press("Enter")
        assert page.eval_on_selector("#detail", "dialog => dialog.open")
        assert page.inner_text("#detail-body").count(focused) == 1  # the file line
        assert page.get_by_role("dialog", name=focused, exact=True).is_visible()  # was an unnamed "dialog"
        page.keyboard.press("Escape")
        assert not page.eval_on_selector("#detail", "dialog => dialog.open")
        unnamed = page.eval_on_selector_all(
            "button, select, input", "controls => controls.filter(control => !control.labels?.length && "
            "!control.getAttribute('aria-label') && !/\\w/.test(control.textContent)).map(control => control.id)")
        assert unnamed == [] and not errors


ODD_CLASSES = ["sea  lion", "  padded", "<script>alert(1)</script>", "a & b \"q\"", "50%_$x\\{}", "N" * 200, "猫 ねこ",
               "مرحبا بالعالم", "😀 emoji"]
"""Class names a real model or --class-names file has: doubled and leading spaces, markup, a long word, CJK, Arabic."""


def test_every_class_name_filters_its_cards_and_long_names_wrap_inside_the_page(tmp_path):
    Image.fromarray(np.full((40, 60, 3), 128, np.uint8)).save(tmp_path / "a.png")
    rows = [{"path": "long_path_" * 20 + ".png" if index == 5 else f"image_{index}.png", "status": "ok",
             "top1_name": name, "top1_probability": 0.5, "entropy": 0.5, "top10_mass": 0.3, "width": 60, "height": 40,
             "peak_x": 1, "peak_y": 1, "overlay": "a.png"} for index, name in enumerate(ODD_CLASSES)]
    write_gallery(tmp_path, rows)
    with browser_page((tmp_path / "index.html").as_uri(), {"width": 1000, "height": 900}) as (page, errors):
        values = page.eval_on_selector_all("#class option", "options => options.map(option => option.value)")
        # an option without value= filtered by its whitespace-collapsed text
        assert values == ["", *sorted(ODD_CLASSES)]
        for name, row in zip(ODD_CLASSES, rows):
            page.select_option("#class", value=name)
            assert shown_paths(page) == [row["path"]], name  # "sea  lion" and "  padded" showed no card
        page.select_option("#class", "")
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        overflowing = page.eval_on_selector_all(
            ".card, .card *, td", "boxes => boxes.filter(box => box.scrollWidth > box.clientWidth + 1).length")
        assert overflowing == 0  # the 200-letter class ran 1,600 pixels past its card and its table cell
        assert page.eval_on_selector_all("th", "cells => cells.every(cell => cell.scrollWidth <= cell.clientWidth)")
        assert not errors


def test_in_a_400_pixel_window_the_class_table_scrolls_and_its_names_stay_whole(tmp_path):
    """The table of six columns is wider than a phone: it scrolled the whole page sideways, and its class names broke
    mid-word ("squa / re")."""
    Image.fromarray(np.full((40, 60, 3), 128, np.uint8)).save(tmp_path / "a.png")
    names = ["square", "triangle", "cross", "long_class_" * 20]
    rows = [{"path": f"image_{index}.png", "status": "ok", "top1_name": name, "top1_probability": 0.5, "entropy": 0.5,
             "top10_mass": 0.3, "width": 60, "height": 40, "peak_x": 1, "peak_y": 1, "overlay": "a.png"}
            for index, name in enumerate(names)]
    write_gallery(tmp_path, rows)
    with browser_page((tmp_path / "index.html").as_uri(), {"width": 400, "height": 900}) as (page, errors):
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        lines = dict(page.eval_on_selector_all("#classes td:first-child bdi", "names => names.map(name => "
                                               "[name.textContent, name.getClientRects().length])"))
        assert [lines[name] for name in names[:3]] == [1, 1, 1], lines  # one line box each: not broken
        assert lines[names[3]] > 1  # the 220-letter one wraps in its column
        assert page.eval_on_selector_all(".card, .card *", "boxes => boxes.filter(box => box.scrollWidth > "
                                                           "box.clientWidth + 1).length") == 0
        assert not errors


def test_the_detail_view_shows_an_overlay_as_large_as_fits_small_ones_scaled_up(tmp_path):
    sizes = {"small.png": (64, 64), "tall.png": (40, 400), "wide.png": (1200, 60)}
    for name, size in sizes.items():
        Image.new("RGB", size, (200, 30, 30)).save(tmp_path / name)
    write_gallery(tmp_path, [{"path": name, "status": "ok", "top1_name": "x", "width": width, "height": height,
                              "overlay": name} for name, (width, height) in sizes.items()])
    with browser_page((tmp_path / "index.html").as_uri(), {"width": 1000, "height": 900}) as (page, errors):
        shown = {}
        for name in sizes:
            page.click(f".card[data-path='{name}']")
            page.wait_for_function("document.querySelector('#detail img').complete")
            shown[name] = page.eval_on_selector("#detail img", "image => [image.width, image.height]")
            page.click("#close")
        # 90 % of the width or 70 % of the height, whichever binds; the 64-pixel overlay was shown 64 pixels wide
        assert shown == {"small.png": [630, 630], "tall.png": [63, 630], "wide.png": [900, 45]}
        assert not errors


@pytest.mark.parametrize("width", [320, 400, 1200])
def test_the_page_navigation_stays_on_one_line_in_a_narrow_window(tmp_path, width):
    """In a 400-pixel window ◀ ended one line and "page 1 / 2 ▶" began the next."""
    Image.fromarray(np.full((40, 60, 3), 128, np.uint8)).save(tmp_path / "a.png")
    write_gallery(tmp_path, [{"path": f"image_{index}.png", "status": "ok", "top1_name": "x", "width": 60,
                              "height": 40, "overlay": "a.png"} for index in range(PAGE_SIZE + 1)])
    with browser_page((tmp_path / "index.html").as_uri(), {"width": width, "height": 900}) as (page, errors):
        boxes = [page.locator(selector).bounding_box() for selector in ("#previous", "#page", "#next")]
        middles = [box["y"] + box["height"] / 2 for box in boxes]
        assert max(middles) - min(middles) < 2 and boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"], boxes
        assert page.inner_text("#page") == "page 1 / 2"
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        assert not errors


def test_in_a_320_pixel_window_the_legend_bar_narrows_between_low_and_high(tmp_path):
    """"low", the 220-pixel bar and "high" are wider than a 320-pixel window's page: "high" went alone to the next
    line, under "low"."""
    write_gallery(tmp_path, [])
    with browser_page((tmp_path / "index.html").as_uri(), {"width": 320, "height": 900}) as (page, errors):
        legend = page.locator("#legends .vitroll-legend")
        words = [legend.get_by_text(word, exact=True).bounding_box() for word in ("low", "high")]
        bar = legend.locator(".vitroll-legend-bar").bounding_box()
        middles = [box["y"] + box["height"] / 2 for box in (*words, bar)]
        assert max(middles) - min(middles) < 2 and words[0]["x"] < bar["x"] < words[1]["x"], (words, bar)
        assert 48 <= bar["width"] < 220 and words[0]["height"] == words[1]["height"]  # the words whole, one line
        assert legend.inner_text().startswith("low\nhigh\ncolormap jet; each map scaled")
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        assert not errors


def test_the_page_buttons_say_they_do_nothing_on_the_first_and_last_page_and_do_nothing_there(tmp_path):
    """◀ on page 1 and ▶ on the last page looked and announced themselves as active, and pressing them did nothing
    visible; they are aria-disabled (still reachable by Tab, unlike ``disabled``) and drawn greyed out."""
    Image.fromarray(np.full((40, 60, 3), 128, np.uint8)).save(tmp_path / "a.png")
    write_gallery(tmp_path, [{"path": f"image_{index:03d}.png", "status": "ok", "top1_name": "x", "width": 60,
                              "height": 40, "overlay": "a.png"} for index in range(2 * PAGE_SIZE + 1)])
    state = ("() => ['#previous', '#next'].map(id => document.querySelector(id).getAttribute('aria-disabled'))")
    opacity = "id => getComputedStyle(document.querySelector(id)).opacity"
    with browser_page((tmp_path / "index.html").as_uri(), {"width": 1200, "height": 900}) as (page, errors):
        assert page.evaluate(state) == ["true", "false"]
        assert float(page.evaluate(opacity, "#previous")) < float(page.evaluate(opacity, "#next"))
        page.focus("#previous")
        page.keyboard.press("Enter")
        assert page.inner_text("#page") == "page 1 / 3" and shown_paths(page)[0] == "image_000.png"
        assert page.evaluate("document.activeElement.id") == "previous"  # focusable while inactive
        page.click("#next")
        assert page.inner_text("#page") == "page 2 / 3" and page.evaluate(state) == ["false", "false"]
        page.click("#next")
        assert page.inner_text("#page") == "page 3 / 3" and page.evaluate(state) == ["false", "true"]
        page.click("#next", force=True)  # Playwright itself waits for an aria-disabled button to become enabled
        page.click("#previous")
        assert page.inner_text("#page") == "page 2 / 3"
        page.fill("#search", "image_000")
        assert page.inner_text("#page") == "page 1 / 1" and page.evaluate(state) == ["true", "true"]
        assert not errors
