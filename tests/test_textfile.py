"""The text files a user gives: UTF-8 with or without a byte-order mark; anything else is one error naming the file."""

from __future__ import annotations

import pytest
import torch

from vitroll.audit.metrics import read_boxes
from vitroll.io.discovery import listed_files
from vitroll.io.text import read_texts
from vitroll.io.textfile import TextFileError, read_text_file
from vitroll.models import class_names

BOM = b"\xef\xbb\xbf"


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path):
    (tmp_path / "f.txt").write_bytes(BOM + "café\nb\n".encode())
    assert read_text_file(tmp_path / "f.txt", "texts") == "café\nb\n"


def test_text_that_is_not_utf_8_is_one_error_naming_the_file_and_the_byte(tmp_path):
    (tmp_path / "latin.txt").write_bytes("ok\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(TextFileError) as error:
        read_text_file(tmp_path / "latin.txt", "class names")
    assert str(error.value) == (f"{tmp_path / 'latin.txt'}: cannot read class names (not UTF-8 text: byte 0xe9 at "
                                "offset 6)")
    with pytest.raises(TextFileError, match=r"missing\.txt: cannot read texts \(No such file or directory\)"):
        read_texts(tmp_path / "missing.txt")


def test_every_user_text_file_reads_past_a_byte_order_mark(tmp_path):
    (tmp_path / "texts.txt").write_bytes(BOM + b"a dog\na cat\n")
    assert read_texts(tmp_path / "texts.txt") == ["a dog", "a cat"]
    (tmp_path / "texts.txt").write_bytes(b"a dog\r\n\r\na cat \r\n\r\n  \r\n")  # CRLF; blank lines ending the file
    assert read_texts(tmp_path / "texts.txt") == ["a dog", "", "a cat"]  # the inner one keeps its line: an error row
    (tmp_path / "list.csv").write_bytes(BOM + b"path,label\nx.png,1\n")
    assert [file.key for file in listed_files(tmp_path / "list.csv")] == ["x.png"]
    (tmp_path / "boxes.csv").write_bytes(BOM + b"x.dcm,0,0,4,4\n")
    assert read_boxes(tmp_path / "boxes.csv") == {"x.dcm": [(0, 0, 4, 4)]}
    (tmp_path / "classes.txt").write_bytes(BOM + b"normal\nnodule\n")
    assert class_names(torch.nn.Identity(), tmp_path / "classes.txt") == ["normal", "nodule"]
    (tmp_path / "classes.json").write_bytes(BOM + b'["normal", "nodule"]')
    assert class_names(torch.nn.Identity(), tmp_path / "classes.json") == ["normal", "nodule"]
