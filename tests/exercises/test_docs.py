"""The course documents keep up with the code: the guide's exercise list, the examples' README."""

import os
import re
import warnings

from minidl.exercises import catalogue, hidden_catalogue, repository_root
from minidl_course.listing import BEGIN_LIST, END_LIST, markdown_list, update_block

ROOT = repository_root()
GUIDE = os.path.join(ROOT, "docs", "instructor-guide.md")


def read(path):
    with open(path, encoding="utf-8") as source:
        return source.read()


def test_the_guide_lists_the_registered_exercises():
    exercises = catalogue()
    text = read(GUIDE)
    assert BEGIN_LIST in text and END_LIST in text
    if not exercises:
        warnings.warn(
            "no exercises are registered yet: the guide's list is not compared", stacklevel=2
        )
        return
    assert update_block(text, markdown_list(exercises, ROOT)) == text, (
        "docs/instructor-guide.md lists other exercises than the registry; refresh it with: "
        "python -m minidl exercise list --markdown --update docs/instructor-guide.md"
    )


def test_the_guides_counts_of_exercises_and_checks_are_the_registrys():
    """The grading time's sentence names the submission it measured: every exercise, every
    check (visible and hidden)."""
    text = " ".join(read(GUIDE).split())
    found = re.search(r"whole submission of the (\d+) exercises .*?\((\d+) checks", text)
    assert found, "the guide no longer says how long a whole submission takes to grade"
    assert (int(found[1]), int(found[2])) == (
        len(catalogue()),
        len(catalogue()) + len(hidden_catalogue()),
    ), "docs/instructor-guide.md: measure a whole submission again and give its counts"


def test_the_examples_readme_describes_every_example():
    readme = read(os.path.join(ROOT, "examples", "README.md"))
    for name in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if name.endswith(".py"):
            assert f"`{name}`" in readme, f"examples/README.md does not mention {name}"


def test_a_files_summary_and_sources_come_from_its_docstring(tmp_path):
    from minidl_course.listing import describe_file

    (tmp_path / "m.py").write_text(
        '"""Winograd minimal filtering F(2x2, 3x3)\n(Lavin &\nGray 2016).\n\n'
        "Also Zhang, De Sa &\nRe 2016, and Lavin & Gray 2016 again;\n"
        'Chellapilla et al. (2006)."""\n'
    )
    summary, sources = describe_file(tmp_path, "m.py")
    assert summary == "Winograd minimal filtering F(2x2, 3x3) (Lavin & Gray 2016)."
    assert sources == "Lavin & Gray 2016; Zhang, De Sa & Re 2016"
    assert describe_file(tmp_path, "missing.py") == ("", "")


def test_the_list_block_is_replaced_and_a_missing_block_is_named():
    text = f"intro\n{BEGIN_LIST}\nold\n{END_LIST}\nrest\n"
    assert update_block(text, "new") == f"intro\n{BEGIN_LIST}\nnew\n{END_LIST}\nrest\n"
    try:
        update_block("no block here", "new")
    except ValueError as exc:
        assert "BEGIN EXERCISE LIST" in str(exc)
    else:
        raise AssertionError("a file without the block must be refused")


def test_the_twelve_week_plan_hands_out_every_exercise_once_and_names_real_files():
    text = read(GUIDE)
    start = text.index("## A 12-week course")
    rows = [
        line
        for line in text[start : text.index("\n## ", start + 1)].splitlines()
        if line.startswith("| ") and line[2:3].isdigit()
    ]
    assert [int(line.split("|")[1]) for line in rows] == list(range(1, 13))
    handed = [i.strip() for line in rows for i in line.split("|")[6].split(",")]
    registered = sorted(e.id for e in catalogue())
    odd = sorted(i for i in handed if handed.count(i) > 1 or i not in registered)
    assert sorted(handed) == registered, (
        "each exercise goes into exactly one week of the 12-week plan in "
        f"docs/instructor-guide.md: missing {sorted(set(registered) - set(handed))}, "
        f"unknown or repeated {odd}"
    )
    for line in rows:
        for name in line.split("|")[4].replace("`", "").split(",") + line.split("|")[5].replace(
            "`", ""
        ).split(","):
            name = name.strip()
            if name != "-":
                folder = "" if name.startswith("notebooks/") else "examples"
                assert os.path.exists(os.path.join(ROOT, folder, name)), name
