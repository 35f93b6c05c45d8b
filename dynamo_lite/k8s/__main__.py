"""`python -m dynamo_lite.k8s -f cluster.yaml [-o DIR]`: what `orchestrator render k8s` does."""

import sys

from dynamo_lite.k8s.render import main

sys.exit(main())
