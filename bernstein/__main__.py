import sys

from bernstein.cli import main

sys.exit(main())
