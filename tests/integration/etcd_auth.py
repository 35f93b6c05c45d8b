"""Turn on authentication in a running etcd, through its own Auth API (what `etcdctl user add`,
`role grant-permission` and `auth enable` do), for the tests of credentials."""

from __future__ import annotations

from aetcd import rpc
from aetcd.rpc import auth_pb2

from dynamo_lite.config import split_url


async def enable_auth(url: str, user: str, password: str, prefix: bytes = b"/dynamo_lite/") -> None:
    """A `root` user (password `password` too), and `user` allowed to read and write `prefix` only."""
    host, port = split_url(url)
    channel = rpc.insecure_channel(f"{host}:{port}")
    try:
        auth = rpc.AuthStub(channel)
        await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=password))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.RoleAdd(rpc.AuthRoleAddRequest(name="dynamo_lite"))
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        permission = auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE, key=prefix, range_end=end)
        await auth.RoleGrantPermission(rpc.AuthRoleGrantPermissionRequest(name="dynamo_lite", perm=permission))
        await auth.UserAdd(rpc.AuthUserAddRequest(name=user, password=password))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=user, role="dynamo_lite"))
        await auth.AuthEnable(rpc.AuthEnableRequest())
    finally:
        await channel.close()
