import sys

from beliefdrift.cli.main import main

sys.exit(main())
