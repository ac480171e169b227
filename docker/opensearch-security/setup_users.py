"""The reranker's two cluster users, with roles that reach only its own indices.

Run once as the cluster's admin (docker/compose.security.yaml runs it as the one-shot
service `cluster-users`); running it again brings the roles and passwords up to date.
Through the OpenSearch security plugin's REST API (`_plugins/_security/api/...`):

    PUT roles/reranker_service, roles/reranker_indexer   the roles of roles.json, for the alias
    PUT internalusers/reranker-service, .../reranker-indexer   each with its password
    PUT rolesmapping/<role>   {"users": [<its user>]}

`reranker serve` then connects as reranker-service, which may read only the alias and its
versions (and keep its experiments and events beside them), so a request the proxy should
not have forwarded is refused by the cluster too: a proxy bug alone cannot leak another
index. `reranker index` and the other writing commands connect as reranker-indexer.

Environment: OPENSEARCH_URL (the cluster), OPENSEARCH_ADMIN_USERNAME (default admin) and
OPENSEARCH_INITIAL_ADMIN_PASSWORD (the admin's), RERANKER_INDEX (the alias, default
reranker), SERVICE_USER_PASSWORD and INDEXER_USER_PASSWORD (the two users'; the security
plugin refuses weak ones), OPENSEARCH_VERIFY_CERTS ("false" only for demo certificates),
OPENSEARCH_CA_CERTS (a CA bundle). Only the standard library: it runs in the reranker image.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping

ROLES_FILE = Path(__file__).with_name("roles.json")
# Each user and the role it is mapped to.
USERS = {"reranker-service": "reranker_service", "reranker-indexer": "reranker_indexer"}
PASSWORD_VARIABLES = {"reranker-service": "SERVICE_USER_PASSWORD", "reranker-indexer": "INDEXER_USER_PASSWORD"}


def roles(alias: str) -> dict[str, dict[str, Any]]:
    """roles.json with `{alias}` replaced by the alias (its names and patterns)."""
    if not alias or any(mark in alias for mark in "*?,: \"\\/"):
        raise ValueError(f"the alias must be one plain index name, got {alias!r}")
    text = ROLES_FILE.read_text(encoding="utf-8").replace("{alias}", alias)
    found: dict[str, dict[str, Any]] = json.loads(text)
    return found


def requests(alias: str, passwords: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """(path under _plugins/_security/api/, body) of every PUT, in order: roles, users,
    role mappings (a mapping names a role and a user that exist)."""
    missing = sorted(set(USERS) - set(passwords))
    if missing:
        raise ValueError(f"no password for {', '.join(missing)}")
    sent: list[tuple[str, dict[str, Any]]] = [(f"roles/{name}", body) for name, body in roles(alias).items()]
    sent += [(f"internalusers/{user}", {"password": passwords[user], "backend_roles": [], "attributes": {}}) for user in USERS]
    sent += [(f"rolesmapping/{role}", {"users": [user]}) for user, role in USERS.items()]
    return sent


class Refused(RuntimeError):
    """The cluster refused a PUT: its status and answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def apply(url: str, admin: tuple[str, str], alias: str, passwords: Mapping[str, str], context: ssl.SSLContext | None = None) -> None:
    """Send every PUT of `requests` to the cluster at `url` as `admin` (user, password).
    Raises Refused with the cluster's answer when one is refused."""
    token = base64.b64encode(f"{admin[0]}:{admin[1]}".encode()).decode()
    for path, body in requests(alias, passwords):
        request = urllib.request.Request(
            f"{url.rstrip('/')}/_plugins/_security/api/{path}", data=json.dumps(body).encode(), method="PUT",
            headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                answer.read()
        except urllib.error.HTTPError as error:
            raise Refused(error.code, f"PUT _plugins/_security/api/{path}: HTTP {error.code} {error.read()[:500].decode(errors='replace')}") from None


def _context(env: Mapping[str, str]) -> ssl.SSLContext:
    if env.get("OPENSEARCH_VERIFY_CERTS", "true").lower() == "false":
        return ssl._create_unverified_context()  # the demo certificates name no host we use
    return ssl.create_default_context(cafile=env.get("OPENSEARCH_CA_CERTS") or None)


def main(env: Mapping[str, str] = os.environ) -> int:
    try:
        url = env["OPENSEARCH_URL"].split(",")[0]
        admin = (env.get("OPENSEARCH_ADMIN_USERNAME") or "admin", env["OPENSEARCH_INITIAL_ADMIN_PASSWORD"])
        passwords = {user: env[variable] for user, variable in PASSWORD_VARIABLES.items()}
    except KeyError as missing:
        print(f"setup_users: set {missing.args[0]}", file=sys.stderr)
        return 2
    alias = env.get("RERANKER_INDEX") or "reranker"
    # The security index is written shortly after the cluster answers its health check
    # (until then: 503 "Security not initialized"); any other refusal is final.
    deadline = time.monotonic() + 120
    while True:
        try:
            apply(url, admin, alias, passwords, _context(env))
            break
        except (Refused, OSError) as exc:
            if (isinstance(exc, Refused) and exc.status != 503) or time.monotonic() > deadline:
                print(f"setup_users: {exc}", file=sys.stderr)
                return 1
            time.sleep(3)
    print(f"users {', '.join(USERS)} ready, with roles {', '.join(USERS.values())} on {alias} and {alias}-v*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
