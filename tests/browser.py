"""A page in a real browser for the tests: Debian's Chromium (/usr/bin/chromium) driven by Playwright."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def browser():
    """Playwright's ``sync_playwright``; skipped where it or Chromium is missing, unless VITROLL_BROWSER_TESTS=required
    (CI installs both), where that is a failure."""
    required = os.environ.get("VITROLL_BROWSER_TESTS") == "required"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            raise
        pytest.skip("playwright is not installed (pip install playwright)")
    if not CHROMIUM.exists():
        if required:
            pytest.fail(f"{CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    return sync_playwright


@contextlib.contextmanager
def browser_page(url: str, viewport: dict[str, int]) -> Iterator[tuple[object, list[str]]]:
    """A headless Chromium page opened at ``url``, and the list its uncaught script errors are appended to."""
    with browser()() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = chromium.new_page(viewport=viewport)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url)
            yield page, errors
        finally:
            chromium.close()


def wait_for_text(page, selector: str, text: str, timeout: float = 30_000) -> None:
    """Wait until the element at ``selector`` shows ``text``; Gradio builds (and rebuilds) its components after the
    page has loaded, so the element may not be there yet while waiting."""
    page.wait_for_function("([selector, text]) => document.querySelector(selector)?.innerText.includes(text) ?? false",
                           arg=[selector, text], timeout=timeout)


def wait_for_exact_text(page, selector: str, text: str, timeout: float = 30_000) -> None:
    """Wait until the element at ``selector`` shows ``text`` and nothing else (but surrounding blanks): while Gradio
    updates it, it shows its timer too."""
    page.wait_for_function("([selector, text]) => document.querySelector(selector)?.innerText.trim() === text",
                           arg=[selector, text], timeout=timeout)
