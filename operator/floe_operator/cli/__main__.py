"""``python -m floe_operator.cli``: the plugin, as ``kubectl floe``."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
