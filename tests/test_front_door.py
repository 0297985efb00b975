"""The README keeps its promises: short, its Python runs as written, its numbers are the code's."""

import os
import re
import subprocess
import sys

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.exercises import catalogue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = [README] + [
    os.path.join(ROOT, "docs", name) for name in sorted(os.listdir(os.path.join(ROOT, "docs")))
]
WORDS = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
WORDS += "fifteen sixteen seventeen eighteen nineteen twenty"
NUMBERS = {word: n for n, word in enumerate(WORDS.split(), start=1)}


def read(path):
    with open(path) as f:
        return f.read()


def test_the_readme_is_short():
    assert len(read(README).splitlines()) <= 130


def test_every_exercise_count_in_the_readme_and_docs_is_the_catalogues():
    registered = len(catalogue())
    for path in DOCS:
        for count in re.findall(r"\b(\d+) exercises\b", read(path)):
            assert int(count) == registered, f"{os.path.basename(path)} says {count} exercises"


def test_the_example_count_is_the_scripts():
    names = os.listdir(os.path.join(ROOT, "examples"))
    scripts = [name for name in names if re.match(r"\d\d_.*\.py$", name)]
    for path in (README, os.path.join(ROOT, "examples", "README.md")):
        word = re.search(r"(\w+) numbered scripts", read(path)).group(1).lower()
        assert NUMBERS[word] == len(scripts), f"{path}: {word} numbered scripts"


def test_the_reading_list_gives_each_files_length_within_a_tenth():
    text = read(README)
    listed = re.findall(r"`([\w/]+\.py)` \(~(\d+)", text)
    assert len(listed) >= 12
    folder = ""
    for path, lines in listed:
        if "/" in path:
            folder = os.path.dirname(path)
        else:
            path = os.path.join(folder, path)
        actual = len(read(os.path.join(ROOT, path)).splitlines())
        assert abs(actual - int(lines)) <= 0.1 * actual, f"{path}: ~{lines} lines, has {actual}"


def test_the_readmes_python_runs_as_written(tmp_path):
    try:
        FashionMNIST(train=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST not found (make data)")
    blocks = re.findall(r"```python\n(.*?)```", read(README), re.S)
    assert blocks
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert "last loss" in done.stdout
