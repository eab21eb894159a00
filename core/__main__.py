"""``python -m mmaplug``: the ``mmaplug`` command."""

import sys

from .cli import main

sys.exit(main())
