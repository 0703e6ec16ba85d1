"""``python -m provision`` = the ``provision`` command."""

from provision.cli import main

main()
