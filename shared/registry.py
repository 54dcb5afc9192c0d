"""Which resources a service holds, and how they nest: the registry.

Each service keeps one :class:`Registry` of its resources; everything that
works on "every resource" (routes, the reconciler, repair, ``sync-status``,
metrics, test helpers) iterates it, and nothing else names a resource's
parent or its columns. A resource is registered once, by its canonical
*key* (``"firewall_rule"``); every other spelling is derived from it:

=================  ============================  ===============================
what               derived as                    ``firewall_rule`` under ``cluster``
=================  ============================  ===============================
metric label       the key                       ``firewall_rule``
words in messages  key with spaces               ``Firewall rule 0190...``
table              key + ``s``                   ``firewall_rules``
path segment       table with dashes             ``firewall-rules``
column naming it   key + ``_id``                 ``firewall_rule_id``
path variable      last word of the key + _id    ``rule_id``
schema names       CamelCase key + suffix        ``FirewallRuleOut``
=================  ============================  ===============================

A child's table carries a column for *every* ancestor (``cluster_id`` on a
rule; ``cluster_id`` and ``firewall_rule_id`` on something under a rule).
Ancestry never changes, so the copies cannot disagree, and any object can be
scoped, routed and pushed from its own row without a join.

A deployment (or a test) may add resources of its own: the modules named in
``RESOURCE_MODULES`` (comma-separated import paths) are imported at start-up,
and each registers what it defines (see docs/design.md, "Adding a resource").
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table

RESOURCE_MODULES = "RESOURCE_MODULES"


@dataclass(frozen=True, eq=False)
class Resource:
    """One kind of object: its key, its table, and where it hangs.

    ``immutable`` names the fields a replay must repeat unchanged (else 409);
    ``schemas`` holds the service's marshmallow schemas for it, by role
    (``create``, ``update``, ``out``, ...); ``options`` anything else a service
    wants to say about it (such as the listing's extra filters).
    """

    key: str
    table: Table
    immutable: tuple[str, ...] = ()
    parent: Resource | None = None
    schemas: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    children: list[Resource] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        for ancestor in self.ancestors:
            if ancestor.id_column not in self.table.c:
                raise ValueError(f"{self.table.name} needs a column {ancestor.id_column} (its {ancestor.key})")
        if self.table.name != self.plural:
            raise ValueError(f"the table of {self.key!r} must be named {self.plural!r}, not {self.table.name!r}")

    def __hash__(self) -> int:
        return id(self)

    # Derived names --------------------------------------------------------

    @property
    def label(self) -> str:
        """The ``resource`` label of every metric."""
        return self.key

    @property
    def words(self) -> str:
        return self.key.replace("_", " ")

    @property
    def plural(self) -> str:
        return f"{self.key}s"

    @property
    def segment(self) -> str:
        """The collection's path segment."""
        return self.plural.replace("_", "-")

    @property
    def id_column(self) -> str:
        """The column by which a descendant names this resource."""
        return f"{self.key}_id"

    @property
    def path_variable(self) -> str:
        """The URL variable that holds this resource's ID."""
        return f"{self.key.rsplit('_', 1)[-1]}_id"

    @property
    def camel(self) -> str:
        return "".join(word.capitalize() for word in self.key.split("_"))

    def describe(self, object_id: Any) -> str:
        """``Firewall rule <id>``: how messages name one object."""
        return f"{self.words.capitalize()} {object_id}"

    # Where it hangs --------------------------------------------------------

    @property
    def ancestors(self) -> tuple[Resource, ...]:
        """Root first, parent last."""
        chain: list[Resource] = []
        node = self.parent
        while node is not None:
            chain.insert(0, node)
            node = node.parent
        return tuple(chain)

    @property
    def root(self) -> Resource:
        return self.ancestors[0] if self.parent is not None else self

    @property
    def descendants(self) -> list[Resource]:
        """Everything registered under it, at any depth, parents first."""
        found = []
        for child in self.children:
            found += [child, *child.descendants]
        return found

    @property
    def parent_column(self) -> str | None:
        return None if self.parent is None else self.parent.id_column

    @property
    def scope_columns(self) -> tuple[str, ...]:
        """The columns naming its ancestors, root first."""
        return tuple(ancestor.id_column for ancestor in self.ancestors)

    def collection_path(self, ids: Mapping[str, Any] | None = None) -> str:
        """The collection's path under ``/v1``: a URL rule (``<object_id:cluster_id>``)
        or, given the ancestors' IDs by column, a concrete path."""
        parts = []
        for ancestor in self.ancestors:
            if ids is None:
                parts += [ancestor.segment, f"<object_id:{ancestor.path_variable}>"]
            else:
                parts += [ancestor.segment, str(ids[ancestor.id_column])]
        return "/" + "/".join([*parts, self.segment])

    def item_path(self, ids: Mapping[str, Any] | None = None) -> str:
        """The object's path: a URL rule, or (given its row or IDs) a concrete path."""
        own = f"<object_id:{self.path_variable}>" if ids is None else str(ids["id"])
        return f"{self.collection_path(ids)}/{own}"

    def scope_from_path(self, path_ids: Mapping[str, Any], *, including_self: bool = False) -> dict[str, Any]:
        """The URL variables of a route turned into column values (``rule_id`` -> ``firewall_rule_id``)."""
        chain = (*self.ancestors, self) if including_self else self.ancestors
        return {ancestor.id_column: path_ids[ancestor.path_variable] for ancestor in chain}


class Registry:
    """A service's resources, parents always before their children."""

    def __init__(self) -> None:
        self._resources: dict[str, Resource] = {}

    def register(self, resource: Resource) -> Resource:
        """Add ``resource`` (its parent must be registered already); return it.

        :raise ValueError: its key or path variable is taken, or its parent unknown here.
        """
        if resource.key in self._resources:
            raise ValueError(f"a resource {resource.key!r} is registered already")
        if resource.parent is not None and self._resources.get(resource.parent.key) is not resource.parent:
            raise ValueError(f"register {resource.parent.key!r} before its child {resource.key!r}")
        variables = [ancestor.path_variable for ancestor in resource.ancestors]
        if resource.path_variable in variables:
            raise ValueError(f"{resource.key!r} and an ancestor share the path variable {resource.path_variable!r}")
        if resource.parent is not None:
            resource.parent.children.append(resource)
        self._resources[resource.key] = resource
        return resource

    def __iter__(self) -> Iterator[Resource]:
        return iter(list(self._resources.values()))

    def __getitem__(self, key: str) -> Resource:
        return self._resources[key]

    def __contains__(self, key: object) -> bool:
        return key in self._resources

    def by_table(self, name: str) -> Resource:
        return next(resource for resource in self if resource.table.name == name)

    @property
    def roots(self) -> list[Resource]:
        return [resource for resource in self if resource.parent is None]


def load_resource_modules(environ: Mapping[str, str] | None = None) -> list[str]:
    """Import the modules ``RESOURCE_MODULES`` names, each registering resources of its own; return their names.

    Called once at start-up by every command, before an app or a reconciler
    is built, so the added resources are served, pushed and repaired like
    the shipped ones.
    """
    names = [name.strip() for name in (environ or os.environ).get(RESOURCE_MODULES, "").split(",") if name.strip()]
    for name in names:
        importlib.import_module(name)
    return names
