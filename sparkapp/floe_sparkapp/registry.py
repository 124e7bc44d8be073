"""Schema registry look-ups, cached: writer schemas by id and the subject's latest version,
each with the schemas it references (Protobuf imports, JSON Schema ``$ref`` to other subjects),
fetched by subject and version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from .contract import SchemaRegistrySpec

T = TypeVar("T")


def _answered(value: T | None) -> T:
    """A field every answer of the registry has: the client types it optional, as it sends
    the same classes."""
    assert value is not None
    return value


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema: str  # the schema text: Avro JSON, a .proto file, a JSON Schema
    schema_type: str  # AVRO, PROTOBUF or JSON
    version: int | None = None
    # every schema it references, directly or not: (the name it is imported by, its text)
    references: tuple[tuple[str, str], ...] = ()


class Registry:
    """``user_info``: ``user:password`` (the registry's Secret, :meth:`JobConfig.registry_auth`);
    ``latest_ttl_seconds``: how long the subject's latest version is kept (the client keeps
    it for good when None, which suits a client used once)."""

    def __init__(
        self,
        config: SchemaRegistrySpec,
        user_info: str | None = None,
        latest_ttl_seconds: float | None = None,
    ):
        settings: dict[str, object] = {"url": config.url}
        if latest_ttl_seconds is not None:
            settings["cache.latest.ttl.sec"] = latest_ttl_seconds
        if user_info:
            settings["basic.auth.user.info"] = user_info
        self.config = config
        self.client = SchemaRegistryClient(settings)
        self._known: dict[int, RegisteredSchema] = {}

    def by_id(self, schema_id: int) -> RegisteredSchema | None:
        """The writer schema with this id; None while the registry does not know it.  Only
        found schemas are kept (an id's schema never changes): an id unknown now may be
        registered later, and its records must then decode."""
        found = self._known.get(schema_id)
        if found is None:
            found = self._by_id(schema_id)
            if found is not None and len(self._known) < 1024:
                self._known[schema_id] = found
        return found

    def _by_id(self, schema_id: int) -> RegisteredSchema | None:
        if schema_id < 0:  # a corrupt header (its high bit set): no registry issues these
            return None
        try:
            found = self.client.get_schema(schema_id)
        except SchemaRegistryError as error:
            if error.http_status_code == 404:
                return None
            raise
        return RegisteredSchema(
            schema_id,
            _answered(found.schema_str),
            found.schema_type or "AVRO",
            references=self._references(found.references),
        )

    def latest(self, subject: str | None = None) -> RegisteredSchema:
        found = self.client.get_latest_version(subject or self.config.subject)
        return RegisteredSchema(
            _answered(found.schema_id),
            _answered(found.schema.schema_str),
            found.schema.schema_type or "AVRO",
            found.version,
            self._references(found.schema.references),
        )

    def version_ids(self, subject: str | None = None, newest: int = 50) -> list[int]:
        """The schema ids of the subject's versions (the ``newest`` of them), oldest first."""
        subject = subject or self.config.subject
        versions = sorted(self.client.get_versions(subject))[-newest:]
        return [_answered(self.client.get_version(subject, v).schema_id) for v in versions]

    def _references(self, references: list[Any] | None) -> tuple[tuple[str, str], ...]:
        """The referenced schemas' texts by import name, theirs included, each once."""
        found: dict[str, str] = {}
        pending = list(references or [])
        while pending:
            reference = pending.pop()
            if reference.name in found:
                continue
            version = self.client.get_version(reference.subject, reference.version)
            found[reference.name] = _answered(version.schema.schema_str)
            pending.extend(version.schema.references or [])
        return tuple(sorted(found.items()))
