"""Validate rendered objects against the Kubernetes API schema of the official client.

The typed models of `kubernetes_asyncio` (generated from the API server's OpenAPI
spec) say, per kind, which fields exist, their types and which are required. The
client's own deserializer ignores unknown fields, so `schema_errors` first walks
the object strictly (every key a field of its model, every value of the field's
type), and builds each model with the client's own validation on, which rejects
missing required fields and values outside a field's enum.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes_asyncio import client

# kind -> (apiVersion, model) of every kind the renderer may emit
KINDS: dict[str, tuple[str, str]] = {
    "Namespace": ("v1", "V1Namespace"),
    "ConfigMap": ("v1", "V1ConfigMap"),
    "Service": ("v1", "V1Service"),
    "ServiceAccount": ("v1", "V1ServiceAccount"),
    "Deployment": ("apps/v1", "V1Deployment"),
    "StatefulSet": ("apps/v1", "V1StatefulSet"),
    "Role": ("rbac.authorization.k8s.io/v1", "V1Role"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "V1RoleBinding"),
}
_VALIDATING = client.Configuration()
_VALIDATING.client_side_validation = True
_PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Problems of one object against its kind's schema; empty when it is valid."""
    kind = obj.get("kind")
    if kind not in KINDS:
        return [f"unknown kind {kind!r}"]
    api_version, model = KINDS[kind]
    if obj.get("apiVersion") != api_version:
        return [f"{kind}: apiVersion {obj.get('apiVersion')!r}, expected {api_version!r}"]
    errors: list[str] = []
    _walk(obj, model, kind, errors)
    return errors


def _walk(value: Any, type_name: str, path: str, errors: list[str]) -> None:
    if value is None:
        return
    if type_name in _PRIMITIVES:
        if not isinstance(value, _PRIMITIVES[type_name]) or (type_name != "bool" and isinstance(value, bool)):
            errors.append(f"{path}: expected {type_name}, got {value!r}")
        return
    if type_name == "object":  # IntOrString and free-form fields
        return
    if type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {value!r}")
            return
        for i, item in enumerate(value):
            _walk(item, type_name[5:-1], f"{path}[{i}]", errors)
        return
    match = re.fullmatch(r"dict\((\w+), (.+)\)", type_name)
    if match:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {value!r}")
            return
        for k, v in value.items():
            _walk(k, match.group(1), f"{path} key", errors)
            _walk(v, match.group(2), f"{path}.{k}", errors)
        return
    model = getattr(client.models, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {type_name} mapping, got {value!r}")
        return
    fields = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, item in value.items():
        if key not in fields:
            errors.append(f"{path}.{key}: not a field of {type_name} (fields: {', '.join(sorted(fields))})")
            continue
        _walk(item, model.openapi_types[fields[key]], f"{path}.{key}", errors)
    try:
        model(local_vars_configuration=_VALIDATING, **{fields[k]: v for k, v in value.items() if k in fields})
    except (ValueError, TypeError) as e:
        errors.append(f"{path}: {type_name}: {e}")
