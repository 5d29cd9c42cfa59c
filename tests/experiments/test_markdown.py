"""A prediction set's name (any character but ``/``) is text in a Markdown report, never
structure (:func:`selfcal._markdown.markdown_text`)."""

from __future__ import annotations

from selfcal._markdown import markdown_link, markdown_names, markdown_text


def test_a_name_cannot_end_a_row_split_a_cell_or_open_markup():
    assert markdown_text("x | y\n# injected heading") == "x \\| y # injected heading"
    assert markdown_text("# title") == "\\# title"
    assert markdown_text("a\tb\x00c\r\n d") == "a b c d"
    assert markdown_text("<img src=x> [a](b) `c` *d*") == (
        "\\<img src=x\\> \\[a\\](b) \\`c\\` \\*d\\*"
    )
    assert markdown_text("back\\slash|") == "back\\\\slash\\|"


def test_ordinary_names_are_unchanged():
    for name in ("chenyaofo_resnet20_cifar10", "mmlu_llama31_8b_base", "a-b.c 2", "ünï sét 名前"):
        assert markdown_text(name) == name
    assert markdown_names(["a_b", "c"]) == "['a_b', 'c']"


def test_a_file_name_stays_inside_its_link():
    assert markdown_link("reliability_a (1).png") == "reliability_a%20%281%29.png"
