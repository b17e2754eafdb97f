import sys

from autheval.cli import main

sys.exit(main())
