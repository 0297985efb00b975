"""``python -m minidl``: the same as the ``minidl`` console script."""

import sys

from .cli import main

sys.exit(main())
