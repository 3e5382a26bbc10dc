import sys

from nodegc.cli import main

sys.exit(main())
