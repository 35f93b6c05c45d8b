"""The admin API of `orchestrator up` (status, pools, scaling), apart from the public OpenAI API."""

from dynamo_lite.orchestrator.admin.client import AdminError, scale_pool
from dynamo_lite.orchestrator.admin.schema import (
    PoolInfo,
    ScaleReply,
    ScaleRequest,
    StatusReply,
)
from dynamo_lite.orchestrator.admin.server import AdminPool, AdminServer, admin_app

__all__ = [
    "AdminError",
    "AdminPool",
    "AdminServer",
    "PoolInfo",
    "ScaleReply",
    "ScaleRequest",
    "StatusReply",
    "admin_app",
    "scale_pool",
]
