"""The building blocks of the cluster.yaml schema: the base section, shared field types, ConfigError.

Kept apart from schema.py so that the section modules (control.py, deploy.py)
and schema.py itself import them without a cycle.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class ConfigError(Exception):
    """A cluster.yaml that cannot be used; the message is for people."""



Port = Annotated[int, Field(ge=0, le=65535)]


def _matching(pattern: str, expected: str) -> AfterValidator:
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if not regex.match(value):
            raise ValueError(f"expected {expected}, got {value!r}")
        return value

    return AfterValidator(check)


Name = Annotated[str, _matching(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$", "letters, digits, '-' or '_' (at most 63)")]
NatsUrl = Annotated[str, _matching(r"^(nats|tls)://[^:/\s]+:\d+/?$", "nats://host:port")]
EtcdUrl = Annotated[str, _matching(r"^https?://[^:/\s]+:\d+/?$", "http://host:port")]
EnvVar = Annotated[str, _matching(r"^[A-Za-z_][A-Za-z0-9_]*$", "the name of an environment variable")]
"""Where a secret is: the spec names the variable, never holds the secret."""


def is_loopback(host: str) -> bool:
    """127.0.0.1, ::1, localhost: reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _secret(key: str, variable: str | None) -> str | None:
    """The value of the environment variable named at `key`; ConfigError when it is unset or empty."""
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(f"{key}: environment variable {variable} is not set (it holds the secret)")
    return value


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
