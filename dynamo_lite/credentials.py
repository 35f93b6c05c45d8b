"""Credentials for NATS and etcd, as typed values, and how they travel between processes.

cluster.yaml never holds a secret: it names environment variables (`nats.token_env`,
`etcd.password_env`, ...) that the config package reads. `orchestrator up` hands the resolved
credentials to the processes it starts as the variables below, never as arguments
(command lines are visible to every user in `ps`):

    DYNAMO_LITE_NATS_TOKEN, or DYNAMO_LITE_NATS_USER and DYNAMO_LITE_NATS_PASSWORD
    DYNAMO_LITE_ETCD_USER and DYNAMO_LITE_ETCD_PASSWORD

`connect_nats` and `etcd_client` read them (`from_environ`) when not handed credentials.
With dynamo_lite/config/, this is the only module that reads environment variables.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

NATS_TOKEN = "DYNAMO_LITE_NATS_TOKEN"
NATS_USER = "DYNAMO_LITE_NATS_USER"
NATS_PASSWORD = "DYNAMO_LITE_NATS_PASSWORD"
ETCD_USER = "DYNAMO_LITE_ETCD_USER"
ETCD_PASSWORD = "DYNAMO_LITE_ETCD_PASSWORD"
VARIABLES = (NATS_TOKEN, NATS_USER, NATS_PASSWORD, ETCD_USER, ETCD_PASSWORD)
"""Every variable that carries credentials to a child process."""


def new_token() -> str:
    """A fresh random secret (256 bits, URL-safe): the embedded NATS server's token, one per `up`."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class NatsCredentials:
    """A token, or a user and password, or nothing (a server without authentication)."""

    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return bool(self.token or self.user)

    def connect_options(self) -> dict[str, str]:
        """Keyword arguments of `nats.connect`."""
        options = {"token": self.token, "user": self.user, "password": self.password}
        return {k: v for k, v in options.items() if v is not None}

    def environ(self) -> dict[str, str]:
        values = {NATS_TOKEN: self.token, NATS_USER: self.user, NATS_PASSWORD: self.password}
        return {k: v for k, v in values.items() if v is not None}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> NatsCredentials:
        return cls(environ.get(NATS_TOKEN) or None, environ.get(NATS_USER) or None,
                   environ.get(NATS_PASSWORD) or None)


@dataclass(frozen=True)
class EtcdCredentials:
    """A user and password, or nothing (an etcd without authentication, as the embedded one)."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.user is not None

    def environ(self) -> dict[str, str]:
        return {ETCD_USER: self.user, ETCD_PASSWORD: self.password or ""} if self.user is not None else {}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> EtcdCredentials:
        user = environ.get(ETCD_USER) or None
        return cls(user, environ.get(ETCD_PASSWORD, "") if user is not None else None)
