"""The one rule of a user's error line (:func:`selfcal.exceptions.one_line`): the command
line's ``error:`` lines, ``selfcal compare``'s failed sets and the ``--sets`` studies'."""

from __future__ import annotations

from selfcal.exceptions import one_line


def test_an_error_is_led_by_what_it_is_about_unless_it_names_it():
    assert one_line(ValueError("bad\n  labels"), "/d/s") == "/d/s: bad labels"
    assert one_line(ValueError("/d/s/val.npz: bad"), "/d/s") == "/d/s/val.npz: bad"
    assert one_line(ValueError("s/val.npz: bad"), "/d/s") == "s/val.npz: bad"  # its last part
    assert one_line(ValueError("the scaling failed"), "/d/s") == "/d/s: the scaling failed"
    assert one_line(ValueError("a-s failed"), "s") == "s: a-s failed"  # inside a longer name


def test_an_os_error_a_key_error_and_an_empty_one_read_as_words():
    assert one_line(FileNotFoundError(2, "No such file", "/d/x"), "/d") == "/d/x: No such file"
    assert one_line(KeyError("no run 'k'")) == "no run 'k'"
    assert one_line(RuntimeError()) == "RuntimeError"
    assert one_line("a  warning\n", None) == "a warning"
