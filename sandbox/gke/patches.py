"""The three PATCH bodies the Kubernetes API takes, applied as the API server applies them.

- ``application/json-patch+json``: RFC 6902 operations (``add``, ``remove``, ``replace``, ``move``,
  ``copy``, ``test``) on RFC 6901 pointers; a failing operation (a ``test`` that does not hold, a path
  that does not exist) is :class:`PatchFailed`, answered 422 as Kubernetes does.
- ``application/merge-patch+json``: RFC 7386 (objects merge, ``null`` deletes, lists replace whole).
- ``application/strategic-merge-patch+json``: like merge patch, but the lists Kubernetes marks
  ``patchStrategy: merge`` merge item by item on their merge key (``containers`` / ``initContainers`` /
  ``env`` / ``volumes`` by ``name``, ``ports`` by ``containerPort``, ``volumeMounts`` by ``mountPath``);
  ``$patch: delete`` in an item removes it, ``$patch: replace`` replaces the list;
  ``$setElementOrder/...`` and ``$retainKeys`` directives are read and ignored.
"""

from __future__ import annotations

import copy
from typing import Any

#: Lists merged by key in a strategic merge patch: field name -> merge key (Kubernetes' struct tags).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "ports": "containerPort", "volumeMounts": "mountPath", "imagePullSecrets": "name",
              "conditions": "type", "tolerations": "", "ownerReferences": "uid"}
#: Operations one JSON patch may carry.
MAX_PATCH_OPS = 1000


class PatchFailed(ValueError):
    """The patch could not be applied (its message is what the API server says)."""


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchFailed(f"JSON pointer {pointer!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchFailed("cannot operate on the whole document")
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, pointer)
    return node, tokens[-1]


def _child(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict) and token in node:
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise PatchFailed(f"doc is missing path: {pointer}: missing value")


def _get(doc: Any, pointer: str) -> Any:
    node = doc
    for token in _tokens(pointer):
        node = _child(node, token, pointer)
    return node


def _add(doc: Any, pointer: str, value: Any) -> None:
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchFailed(f"add operation does not apply: doc is missing path: {pointer}")
    else:
        raise PatchFailed(f"add operation does not apply: doc is missing path: {pointer}")


def _remove(doc: Any, pointer: str) -> Any:
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchFailed(f"remove operation does not apply: doc is missing path: {pointer!r}: missing value")


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 ``operations`` to a copy of ``doc``; returns the copy.

    Raises:
        PatchFailed: a malformed operation, a missing path, or a ``test`` whose value differs
            (``testing value /metadata/resourceVersion failed: test failed``).
    """
    if not isinstance(operations, list):
        raise PatchFailed("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(operations) > MAX_PATCH_OPS:
        raise PatchFailed(f"the JSON patch has {len(operations)} operations, more than {MAX_PATCH_OPS}")
    out = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
            raise PatchFailed(f"invalid operation {operation!r}: missing path")
        op, path = operation.get("op"), operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchFailed(f"{op} operation does not apply: missing value")
        value = copy.deepcopy(operation.get("value"))
        if op == "add":
            _add(out, path, value)
        elif op == "remove":
            _remove(out, path)
        elif op == "replace":
            _remove(out, path)
            _add(out, path, value)
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchFailed(f"{op} operation does not apply: missing from")
            moved = _remove(out, source) if op == "move" else copy.deepcopy(_get(out, source))
            _add(out, path, moved)
        elif op == "test":
            try:
                have = _get(out, path)
            except PatchFailed:
                have = None
            if have != value:
                raise PatchFailed(f"testing value {path} failed: test failed")
        else:
            raise PatchFailed(f"Unexpected kind: {op}")
    return out


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386 merge of ``patch`` into a copy of ``doc``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(doc: Any, patch: Any, field: str = "") -> Any:
    """Kubernetes' strategic merge of ``patch`` into a copy of ``doc`` (see the module doc)."""
    if isinstance(patch, list):
        return _merge_list(doc, patch, field)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue                                  # $setElementOrder/..., $retainKeys, $patch: merge
        if value is None:
            out.pop(key, None)
        else:
            out[key] = strategic_merge_patch(out.get(key), value, key)
    return out


def _merge_list(doc: Any, patch: list[Any], field: str) -> list[Any]:
    key = MERGE_KEYS.get(field, "")
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if not key or not isinstance(doc, list):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "delete")]
    out = copy.deepcopy(doc)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchFailed(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((i for i, have in enumerate(out) if isinstance(have, dict) and have.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
        elif index is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if not k.startswith("$")})
        else:
            out[index] = strategic_merge_patch(out[index], item, field)
    return out
