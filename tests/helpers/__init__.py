"""Helpers shared by the tests: small problems, reference formulas and fake data folders, one
module per area of ``src/`` (``tests/`` is on ``sys.path`` through pytest's ``pythonpath``
setting, so a test writes ``from helpers.bilevel import tanh_net``)."""
