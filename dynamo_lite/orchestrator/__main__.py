"""`python -m dynamo_lite.orchestrator`: the same as the `orchestrator` command."""

import sys

from dynamo_lite.orchestrator.cli import main

sys.exit(main())
