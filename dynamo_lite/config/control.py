"""cluster.yaml sections of the control plane: NATS, etcd and the admin API of `orchestrator up`.

Secrets are given by reference (the names of environment variables), never in the file.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from dynamo_lite.config.base import (
    EnvVar,
    EtcdUrl,
    NatsUrl,
    Port,
    Section,
    _secret,
    is_loopback,
)
from dynamo_lite.credentials import EtcdCredentials, NatsCredentials


class NatsSpec(Section):
    url: NatsUrl | None = None
    """External NATS server, e.g. `nats://10.0.0.5:4222`. Absent: `orchestrator up` starts one, with a random token."""
    host: str = "127.0.0.1"
    """Interface the embedded server binds to."""
    port: Port = 0
    """Client port of the embedded server; 0 picks a free one."""
    token_env: EnvVar | None = None
    """External NATS: the environment variable that holds its token."""
    user: str | None = None
    """External NATS: user name, with `password_env` (instead of a token)."""
    password_env: EnvVar | None = None
    """External NATS: the environment variable that holds `user`'s password."""

    @property
    def embedded(self) -> bool:
        return self.url is None

    @model_validator(mode="after")
    def _credentials_by_reference(self) -> NatsSpec:
        if self.embedded and (self.token_env or self.user or self.password_env):
            raise ValueError("token_env, user and password_env are for an external server (`url`); "
                             "the embedded one gets a new random token at each `orchestrator up`")
        if self.token_env and (self.user or self.password_env):
            raise ValueError("give `token_env`, or `user` with `password_env`, not both")
        if (self.user is None) != (self.password_env is None):
            raise ValueError("`user` and `password_env` go together")
        return self

    def credentials(self) -> NatsCredentials:
        """The external server's credentials, from the variables named here; ConfigError if one is unset."""
        return NatsCredentials(token=_secret("nats.token_env", self.token_env), user=self.user,
                               password=_secret("nats.password_env", self.password_env))


class EtcdSpec(Section):
    url: EtcdUrl | None = None
    """External etcd, e.g. `http://10.0.0.6:2379`. Absent: `orchestrator up` starts one."""
    host: str = "127.0.0.1"
    """Interface the embedded server binds to: loopback only (it has no authentication)."""
    port: Port = 0
    """Client port of the embedded server; 0 picks a free one."""
    lease_ttl_s: Annotated[int, Field(ge=2, le=300)] = 10
    """Time-to-live of worker leases: a killed worker disappears within this time."""
    user: str | None = None
    """External etcd with authentication: user name, with `password_env`."""
    password_env: EnvVar | None = None
    """External etcd: the environment variable that holds `user`'s password."""

    @property
    def embedded(self) -> bool:
        return self.url is None

    @model_validator(mode="after")
    def _safe(self) -> EtcdSpec:
        if self.embedded and not is_loopback(self.host):
            raise ValueError(f"host {self.host!r} is not a loopback address: the embedded etcd has no "
                             "authentication; for etcd shared between machines run one with auth and set `url`")
        if self.embedded and (self.user or self.password_env):
            raise ValueError("user and password_env are for an external etcd (`url`)")
        if (self.user is None) != (self.password_env is None):
            raise ValueError("`user` and `password_env` go together")
        return self

    def credentials(self) -> EtcdCredentials:
        """The external etcd's credentials, from the variable named here; ConfigError if it is unset."""
        return EtcdCredentials(self.user, _secret("etcd.password_env", self.password_env))


class AdminSpec(Section):
    enabled: bool = True
    """Serve the admin API (`GET /status`, `GET /pools`, `POST /pools/{name}/scale`) from `orchestrator up`."""
    host: str = "127.0.0.1"
    """Interface it listens on; anything but loopback needs `token_env`."""
    port: Port = 0
    """Its port; 0 picks a free one (the state file records it; `orchestrator scale` finds it there)."""
    token_env: EnvVar | None = None
    """The environment variable holding the bearer token every admin request must carry; null: none (loopback)."""

    @model_validator(mode="after")
    def _token_off_loopback(self) -> AdminSpec:
        if self.enabled and self.token_env is None and not is_loopback(self.host):
            raise ValueError(f"host {self.host!r} is not a loopback address: name `token_env`, the environment "
                             "variable holding the admin API's bearer token")
        return self

    def token(self) -> str | None:
        """The bearer token, from the variable `token_env` names; ConfigError if it is unset."""
        return _secret("admin.token_env", self.token_env)


class SupervisorSpec(Section):
    restart: bool = True
    """Restart what `orchestrator up` started when it dies on its own: embedded NATS and etcd (same port and
    data), the frontend, Prometheus, and each pool's workers (replaced under new ids)."""
    restart_backoff_s: Annotated[float, Field(gt=0)] = 1.0
    """Delay before the first restart of a part; it doubles with each failure within the window."""
    restart_backoff_max_s: Annotated[float, Field(gt=0)] = 30.0
    """The longest delay between restarts."""
    restart_limit: Annotated[int, Field(ge=0)] = 5
    """A part that fails more often than this within `restart_window_s` is given up (marked failed in `status`)."""
    restart_window_s: Annotated[float, Field(gt=0)] = 300.0
    """How far back failures count toward `restart_limit`; a part up that long starts afresh."""
    check_interval_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    """How often the supervisor checks that its children run."""
