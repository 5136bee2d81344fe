# `python -m eva`: the same as the `eva` command.
import sys

try:
    from eva.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the command line's first modules
    sys.stderr.write("eva: interrupted\n")
    sys.exit(130)

sys.exit(main())
