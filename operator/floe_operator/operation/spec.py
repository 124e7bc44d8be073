"""A KafkaIcebergOperation's spec, as the user writes it: its topic, its type and the section
of its type (Rollback's here; Repair's, Backfill's and Replay's are the contract's, which the
job reads too), each rule with its one message; and the CRD's names."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.config import JsonDict

from floe_sparkapp.contract import BackfillSpec, RepairSpec, ReplaySpec, Rule, _Model

from ..names import OPERATION_KIND, OPERATION_PLURAL

KIND, PLURAL = OPERATION_KIND, OPERATION_PLURAL
SINGULAR = "kafkaicebergoperation"
SHORT_NAMES = ["kio"]

TIME: JsonDict = {"format": "date-time"}
_DIGITS = r"^[0-9]{1,19}$"


class RollbackSpec(_Model):
    """Where to move main back to: one of snapshotId and before."""

    snapshot_id: str | None = Field(
        None,
        pattern=_DIGITS,
        description="A snapshot in main's history (as the topic's "
        "status.table.snapshotId shows them).",
    )
    before: str | None = Field(
        None,
        description="The newest snapshot of main committed at or before this time "
        "(RFC 3339, e.g. 2026-11-27T08:00:00Z).",
        json_schema_extra=TIME,
    )
    table: str | None = Field(
        None,
        description="Which of the topic's tables (a routed topic has several); default: "
        "its table.identifier.",
    )

    RULES = (
        Rule(
            "has(self.snapshotId) != has(self.before)",
            "rollback needs exactly one of snapshotId and before",
            "",
            None,
            lambda r: (r.snapshot_id is None) != (r.before is None),
        ),
    )


class OperationSpec(_Model):
    topic: str = Field(
        min_length=1,
        max_length=253,
        description="The KafkaIcebergTopic, in this namespace, whose table the operation works on.",
    )
    type: Literal["Rollback", "Repair", "Backfill", "Replay"] = Field(
        description="What to do: Rollback (move the table's main back to a snapshot; the "
        "records after it land again), Repair (decode the table's raw rows again, "
        "once their cause is fixed), Backfill (land a range of the topic in the "
        "table, each record once), Replay (produce the table's rows to a topic, "
        "each once)."
    )
    rollback: RollbackSpec | None = None
    repair: RepairSpec | None = None
    backfill: BackfillSpec | None = None
    replay: ReplaySpec | None = None

    RULES = (
        Rule(
            "self.type != 'Rollback' || has(self.rollback)",
            "type Rollback needs the rollback section",
            "",
            None,
            lambda s: s.type != "Rollback" or s.rollback is not None,
        ),
        Rule(
            "self.type != 'Repair' || has(self.repair)",
            "type Repair needs the repair section (repair: {} selects every raw row)",
            "",
            None,
            lambda s: s.type != "Repair" or s.repair is not None,
        ),
        Rule(
            "self.type != 'Backfill' || has(self.backfill)",
            "type Backfill needs the backfill section (backfill: {} lands everything Kafka "
            "has below the table's offsets)",
            "",
            None,
            lambda s: s.type != "Backfill" or s.backfill is not None,
        ),
        Rule(
            "self.type != 'Replay' || has(self.replay)",
            "type Replay needs the replay section (its topic at least)",
            "",
            None,
            lambda s: s.type != "Replay" or s.replay is not None,
        ),
    )

    @property
    def section(self) -> RollbackSpec | RepairSpec | BackfillSpec | ReplaySpec | None:
        """The spec of its type."""
        return {
            "Rollback": self.rollback,
            "Repair": self.repair,
            "Backfill": self.backfill,
            "Replay": self.replay,
        }[self.type]

    @property
    def table(self) -> str | None:
        """The table the spec names, if it names one."""
        return self.section.table if self.section is not None else None
