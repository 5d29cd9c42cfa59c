"""``python -m selfcal.cli``: the same as the ``selfcal`` console script."""

from selfcal.cli import main

main()
