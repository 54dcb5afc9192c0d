"""A resource's wire contract, declared once for both services.

A :class:`Declaration` says what travels on the wire for one kind of object:
its key, its parent, its fields with their validation and their column,
which of them are immutable, and (for a root) the column naming who owns its
tree. Both services import the same declaration and derive everything else
from it:
cluster_svc its create, update, output, page and batch bodies (with ``id``,
``generation`` and the owner added), platform_svc its public create, PATCH
and output bodies (without them), and what it pushes down; each service its
model's columns for the fields and the ancestors (:mod:`shared.registry`).
Each service keeps its own migrations; a table whose columns disagree with its
declaration (a name, a type or a length) stops the service at start-up
(:meth:`Declaration.check_columns`), naming the field.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

from shared.config import ConfigError


# The highest generation an object can have, on either side: PostgreSQL's integer, each service's
# generation column. cluster_svc refuses one above it (422 naming the field); the platform never
# counts past it: a PATCH of an object there is refused (409 generation_exhausted), and a copy
# downstream at it cannot be pushed past, so its row fails, with that reason.
HIGHEST_GENERATION = 2**31 - 1


class DeclarationMismatch(ConfigError):
    """A model and its resource's declaration disagree: the service must not start."""


@dataclass(frozen=True)
class Column:
    """The column that holds a field in each service's table, as plain data (no SQL library):
    ``varchar`` with its ``length``, ``integer`` or ``cidr`` (:func:`shared.types.column_type`
    makes the SQLAlchemy type)."""

    type: str
    length: int | None = None

    def __str__(self) -> str:
        return self.type if self.length is None else f"{self.type}({self.length})"

    def __post_init__(self) -> None:
        if self.type not in COLUMN_TYPES or (self.type == "varchar") != (self.length is not None):
            raise ValueError(f"a column is one of {', '.join(COLUMN_TYPES)}, and only varchar has a length: {self}")


COLUMN_TYPES = ("varchar", "integer", "cidr")


def varchar(length: int) -> Column:
    return Column("varchar", length)


INTEGER = Column("integer")
CIDR = Column("cidr")


@dataclass(frozen=True)
class Field:
    """One field of a resource's body, as both services validate it.

    ``kind`` is the marshmallow field class that loads it (``validate`` and
    ``metadata`` go with it); it writes the field out too, unless it names a
    plainer ``dumped_as`` class (a kind that only adds input checks, such as
    :class:`shared.schemas.Text`). ``column`` is where both services store it:
    a text field with no validator of its own is held to its column's length.
    ``default`` is the value a create takes when the field is left out: an
    update (cluster_svc's PUT) always requires the field, and a PATCH has no
    default at all, so a generated client never sends a value its caller did
    not set.
    """

    kind: type[fields.Field]
    column: Column
    validate: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    immutable: bool = False
    default: Any = ma.missing

    def loader(self, *, required: bool, default: bool) -> fields.Field:
        """The input field: required, or with its create default (``default``), or neither (a PATCH)."""
        options: dict[str, Any] = {"validate": self.validators, "metadata": dict(self.metadata)}
        if default and self.default is not ma.missing:
            options["load_default"] = self.default
        elif required:
            options["required"] = True
        return self.kind(**options)

    @property
    def validators(self) -> Any:
        """``validate``, or for a text field without one, its column's length."""
        if self.validate is None and self.column.length is not None:
            return validate.Length(max=self.column.length)
        return self.validate

    def dumper(self, **options: Any) -> fields.Field:
        """The output field, without the input's validation (``options``: such as ``allow_none``)."""
        return getattr(self.kind, "dumped_as", self.kind)(**options)


class Named:
    """Every spelling of a resource, derived from its canonical ``key`` (see :mod:`shared.registry`)."""

    key: str

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

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


@dataclass(frozen=True, eq=False, repr=False)
class Declaration(Named):
    """One kind of object's wire contract: see the module's docstring.

    ``fields`` keeps its order: outputs list the fields as declared, and
    input bodies list the mutable ones first, then the immutable ones.
    """

    key: str
    fields: Mapping[str, Field]
    parent: Declaration | None = None
    owner: str | None = None  # a root only: cluster_svc's column naming who owns the whole tree

    def __post_init__(self) -> None:
        if (self.owner is None) == (self.parent is None):
            raise ValueError(f"{self.key!r}: a root resource names its owner column, and only a root does")

    def __hash__(self) -> int:
        return id(self)

    @property
    def ancestors(self) -> tuple[Declaration, ...]:
        """Root first, parent last."""
        return () if self.parent is None else (*self.parent.ancestors, self.parent)

    @property
    def immutable_columns(self) -> tuple[str, ...]:
        """What a replay of a create by ID must repeat: the owner (a root's) or the parent, and the
        immutable fields. (cluster_svc's rule; the platform, which invents every ID, checks the body.)"""
        anchor = self.owner if self.parent is None else self.parent.id_column
        return (anchor, *self.immutable)

    @property
    def mutable(self) -> dict[str, Field]:
        return {name: spec for name, spec in self.fields.items() if not spec.immutable}

    @property
    def immutable(self) -> dict[str, Field]:
        return {name: spec for name, spec in self.fields.items() if spec.immutable}

    @property
    def body(self) -> dict[str, Field]:
        """Every field in input order: the mutable ones, then the immutable ones."""
        return {**self.mutable, **self.immutable}

    @property
    def required(self) -> tuple[str, ...]:
        """What a live row always holds: a root's owner and every field a create cannot leave out."""
        fields_ = (name for name, spec in self.fields.items() if spec.default is ma.missing)
        return (*([self.owner] if self.owner else []), *fields_)

    def check_columns(
        self, table_name: str, columns: Mapping[str, Column | None], own: Iterable[str]
    ) -> None:
        """Refuse a table whose columns are not exactly the declared fields (of their declared type
        and length; ``columns`` maps each column name to its :class:`Column`, or None for a type no
        field uses) and ``own`` (what the service adds: its bookkeeping, the ancestors' IDs,
        cluster_svc's owner).

        :raise DeclarationMismatch: naming the field or column missing, of another type, or the
            column nothing declares.
        """
        own = list(own)
        for name, spec in self.fields.items():
            if name not in columns:
                raise DeclarationMismatch(
                    f"the table {table_name} has no column for the field {name!r} that {self.key!r} declares"
                    " (add it to the model and a migration, or remove it from the declaration)"
                )
            if columns[name] != spec.column:
                raise DeclarationMismatch(
                    f"the column {table_name}.{name} is {columns[name] or 'of another type'}, where {self.key!r}"
                    f" declares {spec.column} (change the model and a migration, or the declaration)"
                )
        for name in own:
            if name not in columns:
                raise DeclarationMismatch(f"the table {table_name} needs a column {name!r}")
        for name in sorted(set(columns) - set(own) - set(self.fields)):
            raise DeclarationMismatch(
                f"the column {table_name}.{name} is not a field of {self.key!r}'s declaration"
                " (declare it, or remove it from the model and a migration)"
            )
