"""The OpenSearch index templates in index_templates/, as the store installs them.

Files: `NAME.component.json` (component templates, PUT as they are) and one
`NAME.index-template.json` (the composable index template). Its `index_patterns` is
rewritten to `ALIAS-v*` for the configured alias, so several aliases can share the
component templates; everything else is installed exactly as written.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reranker.errors import ConfigError

COMPONENT_SUFFIX = ".component.json"
INDEX_TEMPLATE_SUFFIX = ".index-template.json"


def template_dirs() -> list[Path]:
    """Where the templates may be: the source checkout, then the installed copy."""
    return [
        Path(__file__).resolve().parents[2] / "index_templates",
        Path(sys.prefix) / "share" / "reranker" / "index_templates",
    ]


@dataclass(frozen=True)
class Templates:
    components: dict[str, dict[str, Any]]
    index_template_name: str
    index_template: dict[str, Any]
    directory: Path

    def index_template_for(self, alias: str) -> tuple[str, dict[str, Any]]:
        """(name, body) of the index template for `alias`'s versioned indices."""
        default_alias = self.index_template_name
        name = default_alias if alias == default_alias else f"{default_alias}-{alias}"
        body = json.loads(json.dumps(self.index_template))
        body["index_patterns"] = [f"{alias}-v*"]
        # Alias "papers-v2"'s versions match "papers-v*" too, and the cluster refuses two
        # templates of one priority that match an index. The longer alias is the more
        # specific (a pattern that matches another alias's versions is a prefix of it): its
        # template takes precedence.
        body["priority"] = int(body.get("priority", 0)) + len(alias)
        return name, body

    @property
    def mappings(self) -> dict[str, Any]:
        """The merged mappings of the component templates (what an index gets)."""
        merged: dict[str, Any] = {}
        for body in self.components.values():
            mappings = body.get("template", {}).get("mappings")
            if mappings:
                merged.update(mappings)
        return merged


def load_templates(directory: Path | None = None) -> Templates:
    """Read the templates from `directory` (default: the first of `template_dirs()`)."""
    if directory is None:
        directory = next((d for d in template_dirs() if d.is_dir()), None)
        if directory is None:
            raise ConfigError(
                "index templates not found (looked in " + ", ".join(map(str, template_dirs())) + "); reinstall the package"
            )
    components: dict[str, dict[str, Any]] = {}
    index_templates: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.json")):
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read index template {path}: {exc}") from None
        if path.name.endswith(COMPONENT_SUFFIX):
            components[path.name.removesuffix(COMPONENT_SUFFIX)] = body
        elif path.name.endswith(INDEX_TEMPLATE_SUFFIX):
            index_templates.append((path.name.removesuffix(INDEX_TEMPLATE_SUFFIX), body))
    if len(index_templates) != 1:
        raise ConfigError(f"{directory} must hold exactly one *{INDEX_TEMPLATE_SUFFIX}, found {len(index_templates)}")
    name, body = index_templates[0]
    missing = [c for c in body.get("composed_of", []) if c not in components]
    if missing:
        raise ConfigError(f"index template {name} is composed of missing component templates: {', '.join(missing)}")
    return Templates(components=components, index_template_name=name, index_template=body, directory=directory)
