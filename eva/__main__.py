# `python -m eva`: the same as the `eva` command.
import sys

from eva.cli.main import main

sys.exit(main())
