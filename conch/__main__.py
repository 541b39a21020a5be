"""``python -m conch``: the same as the ``conch`` command."""

from conch.cli import main

main()
