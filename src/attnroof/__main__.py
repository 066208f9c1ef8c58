"""``python -m attnroof``."""

from attnroof.cli import main

raise SystemExit(main())
