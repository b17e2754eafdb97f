import sys

from autheval.cli.main import main

sys.exit(main())
