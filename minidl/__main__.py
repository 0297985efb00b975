"""``python -m minidl``: the same as the ``minidl`` console script (``minidl_app.cli``)."""

import sys

from minidl_app.cli import main

sys.exit(main())
