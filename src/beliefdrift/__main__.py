import sys

from beliefdrift.cli import main

sys.exit(main())
