import sys

from gpustack_operator.cli import main

sys.exit(main())
