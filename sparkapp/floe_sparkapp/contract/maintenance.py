"""The table's maintenance (compaction, snapshot expiry, orphan files' removal, manifests'
rewrite), each on its schedule, and the resources of its runs."""

from __future__ import annotations

from pydantic import Field

from ..units import QUANTITY, duration_seconds, size_bytes
from .base import _duration, _Model, duration_rule, size_rule

CRON = (
    r"^(@(yearly|annually|monthly|weekly|daily|hourly)|"
    r"[-0-9*/,A-Za-z?]+(\s+[-0-9*/,A-Za-z?]+){4})$"
)
# The default retention keeps snapshots at least this long (seconds), for readers' scans.
MIN_DEFAULT_SNAPSHOT_AGE_SECONDS = 300


class ResourcesSpec(_Model):
    cores: int = Field(1, ge=1, le=64)
    memory: str = Field("1g", pattern=QUANTITY)


class _MaintenanceAction(_Model):
    enabled: bool = Field(True, description="Run this action on its schedule.")


class CompactionSpec(_MaintenanceAction):
    RULES = (
        size_rule(
            "targetFileSize", "compaction.targetFileSize", 1024 * 1024, "must be at least 1Mi"
        ),
    )

    schedule: str = Field("17 * * * *", pattern=CRON, description="Cron schedule (UTC).")
    target_file_size: str = Field(
        "256Mi",
        pattern=QUANTITY,
        max_length=32,
        description=(
            "Size of the files compaction writes (at least 1Mi; lower-case units are binary, as in "
            "Spark)."
        ),
    )
    min_input_files: int = Field(
        5,
        ge=2,
        le=10_000,
        description=("Rewrite a partition's files only when there are at least this many."),
    )

    @property
    def target_file_size_bytes(self) -> int:
        return size_bytes(self.target_file_size)


class ExpireSnapshotsSpec(_MaintenanceAction):
    RULES = (
        duration_rule("maxAge", "expireSnapshots.maxAge", at_least=60, words="must be at least 1m"),
    )

    schedule: str = Field("43 3 * * *", pattern=CRON, description="Cron schedule (UTC).")
    retain_last: int = Field(100, ge=1, le=100_000, description="Snapshots always kept.")
    max_age: str | None = _duration(
        None,
        "Older snapshots expire (never the newest one floe wrote, which holds the "
        "offsets); at least 1m. Default: retainLast commit intervals, so that the table "
        "keeps about retainLast commits and its metadata stays small at any interval, "
        "but at least 5m, so that readers keep their snapshots at a short interval.",
    )


class RemoveOrphansSpec(_MaintenanceAction):
    RULES = (
        duration_rule(
            "olderThan",
            "removeOrphans.olderThan",
            at_least=3600,
            words="must be at least 1h: a younger unreferenced file may belong "
            "to a commit still in flight",
        ),
    )

    schedule: str = Field("13 4 * * 0", pattern=CRON, description="Cron schedule (UTC).")
    older_than: str = _duration(
        "3d",
        "Only unreferenced files older than this are deleted "
        "(at least 1h: younger ones may belong to a commit in "
        "flight).",
    )

    @property
    def older_than_seconds(self) -> int:
        return duration_seconds(self.older_than)


class RewriteManifestsSpec(_MaintenanceAction):
    schedule: str = Field("29 5 * * *", pattern=CRON, description="Cron schedule (UTC).")


class MaintenanceSpec(_Model):
    compaction: CompactionSpec = CompactionSpec()
    expire_snapshots: ExpireSnapshotsSpec = ExpireSnapshotsSpec()
    remove_orphans: RemoveOrphansSpec = RemoveOrphansSpec()
    rewrite_manifests: RewriteManifestsSpec = RewriteManifestsSpec()
    resources: ResourcesSpec = Field(
        ResourcesSpec(memory="2g"),
        description=(
            "CPU cores and memory of each maintenance run (Spark in local mode in one pod)."
        ),
    )
