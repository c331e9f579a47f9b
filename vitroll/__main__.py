import sys

from vitroll.cli import main

sys.exit(main())
