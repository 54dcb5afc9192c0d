"""Which resources a service holds, and how they nest: the registry.

Each service keeps one :class:`Registry` of its resources, filled by its
models: a model class defined with ``declares=<Declaration>`` (see
:mod:`shared.declaration`) registers its resource as it is defined.
Everything that works on "every resource" (routes, the reconciler, repair,
``sync-status``, metrics, purge) iterates it, and nothing else names a
resource's parent or its columns. A resource has one canonical *key*
(``"firewall_rule"``), its declaration's; every other spelling is derived
from it:

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

A model's table, its fields' columns (type and length as declared) and its
ancestors' ID columns are derived from its declaration (:func:`registering`),
as are the constraints and indexes the service adds to every resource's
table; a model writes only what is its own.

A deployment (or a test) may add resources of its own: the modules named in
``RESOURCE_MODULES`` (comma-separated import paths) are imported at start-up,
and each defines a declaration and a model per service (see docs/design.md,
"Adding a resource").
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ForeignKey, Table, Uuid
from sqlalchemy.orm import mapped_column

from shared.declaration import Declaration, Named
from shared.types import column_type, declared_as

RESOURCE_MODULES = "RESOURCE_MODULES"


@dataclass(frozen=True, eq=False, repr=False)
class Resource(Named):
    """One kind of object as a service holds it: its declaration, its table, and where it hangs.

    ``immutable`` names the columns a replay must repeat unchanged (else 409).
    Each service derives its bodies from ``declaration`` (its ``schemas``
    module, once per resource).
    """

    declaration: Declaration
    table: Table
    immutable: tuple[str, ...] = ()
    parent: Resource | None = None
    children: list[Resource] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.table.name != self.plural:
            raise ValueError(f"the table of {self.key!r} must be named {self.plural!r}, not {self.table.name!r}")

    def __hash__(self) -> int:
        return id(self)

    @property
    def key(self) -> str:
        return self.declaration.key

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
    """A service's resources, parents always before their children.

    ``columns`` gives the columns a service adds to a declared resource's
    table (its ID and bookkeeping; the ancestors' IDs are added here), and
    ``immutable`` the columns a replay of a create must repeat.
    """

    def __init__(
        self,
        *,
        columns: Callable[[Declaration], Iterable[str]],
        immutable: Callable[[Declaration], tuple[str, ...]],
    ) -> None:
        self._resources: dict[str, Resource] = {}
        self._columns = columns
        self._immutable = immutable

    def declare(self, declaration: Declaration, table: Table) -> Resource:
        """Register ``declaration``'s resource, held in ``table``; return it.

        :raise DeclarationMismatch: the table's columns are not the declared fields and this service's own.
        :raise ValueError: its parent is not registered here, or its key is taken.
        """
        parent = None
        if declaration.parent is not None:
            parent = self._resources.get(declaration.parent.key)
            if parent is None or parent.declaration is not declaration.parent:
                raise ValueError(f"define the model of {declaration.parent.key!r} before its child {declaration.key!r}")
        if declaration.key in self._resources:
            raise ValueError(f"a resource {declaration.key!r} is registered already")
        if declaration.path_variable in [ancestor.path_variable for ancestor in declaration.ancestors]:
            raise ValueError(f"{declaration.key!r} and an ancestor share the path variable {declaration.path_variable!r}")
        own = [*self._columns(declaration), *(ancestor.id_column for ancestor in declaration.ancestors)]
        declaration.check_columns(table.name, {column.name: declared_as(column.type) for column in table.c}, own)
        resource = Resource(declaration, table, immutable=self._immutable(declaration), parent=parent)
        if parent is not None:
            parent.children.append(resource)
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


def registering(
    registry: Registry,
    *,
    columns: Callable[[Declaration], Mapping[str, Any]],
    table_args: Callable[[Declaration, str], tuple[Any, ...]] = lambda declaration, table: (),
) -> type:
    """A mixin for a service's declarative base: a model class defined with
    ``declares=<Declaration>`` gets its table named (the key's plural), the
    mapped ``columns(declaration)`` it does not define itself, and
    ``table_args(declaration, table)`` beside its own ``__table_args__``;
    then it registers its resource in ``registry`` as it is defined.

    :raise DeclarationMismatch: (while the model is defined) its columns disagree with the declaration.
    """

    class Registering:
        def __init_subclass__(cls, declares: Declaration | None = None, **kwargs: Any) -> None:
            if declares is not None:
                if "__tablename__" not in cls.__dict__:
                    cls.__tablename__ = declares.plural
                for name, column in columns(declares).items():
                    if name not in cls.__dict__:
                        setattr(cls, name, column)
                extra = table_args(declares, cls.__tablename__)
                if extra:
                    cls.__table_args__ = (*cls.__dict__.get("__table_args__", ()), *extra)
            super().__init_subclass__(**kwargs)  # the ORM maps the class, and so makes its table
            if declares is not None:
                registry.declare(declares, cls.__table__)

    return Registering


def declared_columns(declaration: Declaration, *, nullable: bool, index_parent: bool) -> dict[str, Any]:
    """The mapped columns a model of ``declaration`` gets: its ID, an ID column (a foreign key) for
    every ancestor (indexed for the parent when ``index_parent``), and a column per field, of its
    declared type, ``nullable`` or not."""
    found: dict[str, Any] = {"id": mapped_column(Uuid, primary_key=True)}
    for ancestor in declaration.ancestors:
        index = True if index_parent and ancestor is declaration.parent else None
        found[ancestor.id_column] = mapped_column(Uuid, ForeignKey(f"{ancestor.plural}.id"), nullable=False, index=index)
    for name, spec in declaration.fields.items():
        found[name] = mapped_column(column_type(spec.column), nullable=nullable)
    return found


def load_resource_modules(environ: Mapping[str, str] | None = None) -> list[str]:
    """Import the modules ``RESOURCE_MODULES`` names, each defining resources of its own; return their names.

    Called once at start-up by every command, before an app or a reconciler
    is built, so the added resources are served, pushed and repaired like
    the shipped ones.
    """
    names = [name.strip() for name in (environ or os.environ).get(RESOURCE_MODULES, "").split(",") if name.strip()]
    for name in names:
        importlib.import_module(name)
    return names
