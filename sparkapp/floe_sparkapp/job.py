"""The streaming job: a Kafka topic into its Iceberg table, exactly once.

:func:`start` prepares the table (created from the registry schema, evolved additively), picks
the starting offsets (the table's, unless a checkpoint resumes at or below them) and starts a
Structured Streaming query whose ``foreachBatch`` runs :class:`BatchWriter`.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from . import catalog as catalogs
from . import cdc, checkpoint, metrics
from .avro_types import AvroMappingError
from .checkpoint import CheckpointAhead
from .commit import (
    DEAD_LETTER_ERROR,
    BranchCommitter,
    Committed,
    claim_table,
    commit_with_retries,
    last_commit,
    merge_offsets,
    summary_properties,
    sweep_branches,
)
from .config import ROW_LEVEL, JobConfig, dir_values, env_values
from .decode import WriterPlan, decode_avro, decode_json, decode_raw, frame, table_rows
from .evolution import BreakingChange, evolve_for_writer, fit_without_evolution
from .layout import ensure_table
from .librdkafka import librdkafka_settings
from .registry import Registry
from .upsert import Upsert, with_deletion_vectors

log = logging.getLogger("floe.job")


class DataLossError(RuntimeError):
    """Kafka no longer has records the table has not got: never skipped silently."""


def kafka_client_settings(config: JobConfig) -> dict[str, str]:
    """Extra Kafka client settings: the plain ones and the secret ones (files, environment)."""
    return {**config.kafka.properties,
            **dir_values(config.kafka.properties_dir, "kafka.propertiesDir"),
            **env_values(config.kafka.properties_from_env, "kafka.propertiesFromEnv")}


def _consumer(config: JobConfig) -> Any:
    """A confluent-kafka consumer of the job's consumer group (no subscription)."""
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": config.kafka.bootstrap_servers,
                     "group.id": config.consumer_group, "enable.auto.commit": False,
                     **librdkafka_settings(kafka_client_settings(config))})


def spark_catalog_conf(config: JobConfig) -> dict[str, str]:
    conf = catalogs.spark_conf(config.table.catalog)
    # The job changes the table through PyIceberg too (creation, evolution): never cache it.
    conf[f"spark.sql.catalog.{config.table.catalog.name}.cache-enabled"] = "false"
    return conf


def build_session(config: JobConfig) -> SparkSession:
    builder = SparkSession.builder.appName(f"floe {config.writer}")
    builder = builder.config("spark.sql.extensions",
                             "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for key, value in spark_catalog_conf(config).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _registry(config: JobConfig) -> Registry | None:
    registry = config.value.schema_registry
    return Registry(registry) if registry is not None and config.value.format != "raw" else None


def prepare_table(config: JobConfig, registry: Registry | None) -> Any:
    """Creates the table when absent and evolves it to the subject's latest schema."""
    value = None
    if registry is not None:
        latest = registry.latest()
        value = cdc.table_value(latest.schema, config.table.mode).struct
    catalog = catalogs.load_catalog(config.table.catalog)
    table, created = ensure_table(catalog, config.table, value)
    if created:
        log.info("created table %s", config.table.identifier)
    elif value is not None and config.schema_evolution == "additive":
        try:
            plan = evolve_for_writer(table, value)
            if plan.needs_update:
                log.info("evolved table %s: %s", config.table.identifier,
                         "; ".join(str(c) for c in plan.changes))
        except BreakingChange as change:
            log.warning("table %s keeps its schema: %s", config.table.identifier, change)
    return table


def starting_offsets(config: JobConfig, committed: Committed,
                     partitions: list[int]) -> str:
    """Spark's startingOffsets: the table's offsets where it has some, else the configured start."""
    if not committed.offsets:
        return config.kafka.starting_offsets
    fallback = -2 if config.kafka.starting_offsets == "earliest" else -1
    offsets = {str(p): committed.offsets.get(p, fallback) for p in sorted(set(partitions)
                                                                           | set(committed.offsets))}
    return json.dumps({config.kafka.topic: offsets})


def topic_partitions(config: JobConfig) -> list[int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers,
                         **librdkafka_settings(kafka_client_settings(config))})
    metadata = admin.list_topics(config.kafka.topic, timeout=30)
    topic = metadata.topics.get(config.kafka.topic)
    if topic is None or topic.error is not None:
        return []
    return sorted(topic.partitions)


def watermarks(config: JobConfig, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """Kafka's earliest and next offset of each partition."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(config)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(config.kafka.topic, p),
                                                  timeout=30) for p in partitions}
    finally:
        consumer.close()


def check_offsets_available(config: JobConfig, committed: Committed) -> None:
    """Fails when Kafka no longer holds what follows the table's committed offsets: retention
    deleted records the table has not got, or the topic was deleted and created again (its
    offsets started over below the table's)."""
    if not committed.offsets:
        return
    lost, reset = [], []
    marks = watermarks(config, sorted(committed.offsets))
    for partition, offset in sorted(committed.offsets.items()):
        low, high = marks[partition]
        if high < offset:
            reset.append(f"partition {partition}: the table has offsets below {offset}, "
                         f"Kafka's latest is {high}")
        elif low > offset:
            lost.append(f"partition {partition}: the table has offsets below {offset}, "
                        f"Kafka's earliest is {low} ({low - offset} records lost)")
    if reset:
        raise DataLossError(
            f"DataLoss: topic {config.kafka.topic}: Kafka's offsets are below the table's, so "
            f"the topic was deleted and created again (or truncated); {'; '.join(reset)}. "
            "floe does not write records whose offsets the table already holds: to ingest "
            "the new topic from its start, create the resource again with another "
            "table.identifier.")
    if lost:
        raise DataLossError(
            f"DataLoss: topic {config.kafka.topic}: Kafka retention deleted records the "
            f"table has not got; {'; '.join(lost)}. floe never skips records silently: "
            "restore them or reset the table's offsets.")


def rewind_checkpoint(spark: SparkSession, config: JobConfig, committed: Committed,
                      partitions: list[int]) -> bool:
    """Removes a checkpoint that would resume above the table's offsets (it outlived its table,
    or ``main`` was rolled back), so the query starts from the table's offsets.  Returns
    whether the query resumes from the checkpoint."""
    location = config.checkpoint_location
    resume = checkpoint.resume_offsets(spark, location, config.kafka.topic)
    if resume is None:
        return False
    floor = None
    if config.kafka.starting_offsets == "earliest":
        missing = sorted(set(resume) - set(committed.offsets))
        floor = {p: low for p, (low, _) in watermarks(config, missing).items()} if missing else {}
    ahead = checkpoint.ahead_of(resume, committed.offsets, floor)
    if not ahead:
        return True
    log.warning("the checkpoint at %s is ahead of table %s (%s): it is removed and the job "
                "starts from the table's offsets %s", location, config.table.identifier,
                "; ".join(ahead), committed.offsets or config.kafka.starting_offsets)
    checkpoint.remove(spark, location)
    return False


DEAD_LETTER_ATTEMPTS = 3


def _cause(error: Exception) -> str:
    """The innermost Java exception of a failed Spark action (``Caused by: ...``), or the first
    line of the error."""
    text = str(error)
    causes = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)", text)
    if causes:
        return causes[-1][:500]
    found = re.search(r"([\w.$]+(?:Exception|Error): [^\n]*)", text)
    return (found.group(1) if found else text.splitlines()[0] if text else repr(error))[:500]


def _undecodable(rows: DataFrame) -> Any:
    """Rows whose value could not be decoded (not those decoded but for recursive fields)."""
    failed = F.col("value_error").isNotNull()
    return failed & F.col("value").isNull() if "value" in rows.columns else failed


@dataclass
class BatchWriter:
    """``foreachBatch`` function: decodes one micro-batch and commits it exactly once."""

    config: JobConfig
    spark: SparkSession
    registry: Registry | None
    committer: BranchCommitter = field(init=False)
    upsert: Upsert | None = field(init=False, default=None)  # mode upsert: how rows change
    plans: dict[int, WriterPlan] = field(default_factory=dict)
    planned_for: int | None = None  # the table schema id the plans were made against
    previous_end: tuple[int, dict[int, int] | None] = (-1, None)  # the last batch's end

    def __post_init__(self) -> None:
        self.committer = BranchCommitter(self.spark, self.config.table.catalog.name,
                                         self.config.table.identifier, self.config.writer)
        self.catalog = catalogs.load_catalog(self.config.table.catalog)
        mode = self.config.table.mode
        self.upsert = (Upsert(self.config.table.key_columns,
                              has_value=self.config.value.format != "raw", cdc=mode == "cdc")
                       if mode in ROW_LEVEL else None)

    @property
    def table_name(self) -> str:
        return f"{self.config.table.catalog.name}.{self.config.table.identifier}"

    def _plan(self, schema_id: int, table: Any) -> WriterPlan:
        """How to decode records of one writer schema id (evolving the table if additive)."""
        assert self.registry is not None
        found = self.registry.by_id(schema_id)
        if found is None:
            return WriterPlan(schema_id, error=f"unknown schema id {schema_id}: the schema "
                                               "registry has no schema with this id")
        if found.schema_type.upper() != "AVRO":
            return WriterPlan(schema_id, error=f"schema id {schema_id} is "
                                               f"{found.schema_type}, not Avro")
        try:
            mapped = cdc.table_value(found.schema, self.config.table.mode)
        except AvroMappingError as error:
            return WriterPlan(schema_id, error=f"schema id {schema_id}: {error}")
        fit = evolve_for_writer if self.config.schema_evolution == "additive" else (
            fit_without_evolution)
        try:
            plan = fit(table, mapped.struct)
        except BreakingChange as change:
            return WriterPlan(schema_id, error=f"schema id {schema_id}: {change}")
        if plan.needs_update:
            log.info("schema id %d evolved table %s: %s", schema_id, self.table_name,
                     "; ".join(str(c) for c in plan.changes))
        return WriterPlan(schema_id, schema=found.schema,
                          recursive_fields=mapped.recursive_fields,
                          routes=tuple(sorted(plan.routes.items())))

    def _decode(self, fresh: DataFrame, table: Any, schema_ids: list[int]) -> DataFrame:
        """Table rows from Kafka rows; ``schema_ids`` are the writer schema ids in the batch."""
        fmt = self.config.value.format
        if fmt == "raw":
            return table_rows(decode_raw(fresh), has_value=False)
        value_type = self.spark.table(self.table_name).schema["value"].dataType
        changes = self.config.table.mode == "cdc"
        if fmt == "json" and changes:
            parsed = decode_json(fresh, cdc.json_type(value_type))
            return self._changes(parsed.withColumn("_value", cdc.unwrap_json(F.col("_value"))))
        if fmt == "json":
            return table_rows(decode_json(fresh, value_type), has_value=True)
        changed = False
        plans = {}
        if table.schema().schema_id != self.planned_for:  # e.g. an approval renamed columns
            self.plans.clear()
            self.planned_for = table.schema().schema_id
        for schema_id in schema_ids:
            plan = self.plans.get(schema_id)
            if plan is None:
                before = table.schema().schema_id
                plan = self._plan(schema_id, table)
                if plan.error is None:  # refused ones are looked at again: an approval may come
                    self.plans[schema_id] = plan
                table.refresh()
                changed |= table.schema().schema_id != before
            plans[schema_id] = plan
        if changed:  # plans made against the older schema still decode; the projection changed
            value_type = self.spark.table(self.table_name).schema["value"].dataType
        if changes:  # the envelope decoded, its images projected onto the table's rows
            plans = {i: replace(plan, routes=cdc.envelope_routes(plan.routes))
                     for i, plan in plans.items()}
            return self._changes(decode_avro(frame(fresh), plans, cdc.envelope_type(value_type)))
        return table_rows(decode_avro(frame(fresh), plans, value_type), has_value=True)

    def _changes(self, envelopes: DataFrame) -> DataFrame:
        return table_rows(cdc.change_rows(envelopes, self.config.table.key_columns),
                          has_value=True, cdc=True)

    def _dead_letters(self, bad: DataFrame) -> None:
        """Sends undecodable rows to the dead-letter topic, with why and where from."""
        headers = F.concat(
            F.coalesce(F.col("kafka.headers"), F.array().cast("array<struct<key:string,value:binary>>")),
            F.array(
                F.struct(F.lit("floe.error").alias("key"),
                         F.encode(F.col("value_error"), "UTF-8").alias("value")),
                F.struct(F.lit("floe.topic").alias("key"),
                         F.encode(F.col("kafka.topic"), "UTF-8").alias("value")),
                F.struct(F.lit("floe.partition").alias("key"),
                         F.encode(F.col("kafka.partition").cast("string"), "UTF-8").alias("value")),
                F.struct(F.lit("floe.offset").alias("key"),
                         F.encode(F.col("kafka.offset").cast("string"), "UTF-8").alias("value")),
            ))
        writer = (bad.select(F.col("key"), F.col("value_raw").alias("value"),
                             headers.alias("headers"))
                  .write.format("kafka")
                  .option("kafka.bootstrap.servers", self.config.kafka.bootstrap_servers)
                  .option("topic", self.config.dead_letter.topic)
                  .option("includeHeaders", "true")
                  # a missing topic fails the send in seconds rather than a minute
                  .option("kafka.max.block.ms", "15000"))
        for key, value in kafka_client_settings(self.config).items():
            writer = writer.option(f"kafka.{key}", value)
        writer.save()

    def _send_dead_letters(self, bad: DataFrame, errors: int) -> str | None:
        """Sends the undecodable rows to the dead-letter topic, trying a few times.  When the
        topic keeps refusing them (too large, missing, not allowed), returns why: the rows are
        still committed, with their raw value and reason, and the commit records the failure
        for the status."""
        topic = self.config.dead_letter.topic
        for attempt in range(1, DEAD_LETTER_ATTEMPTS + 1):
            try:
                self._dead_letters(bad)
                return None
            except Exception as error:  # noqa: BLE001 - any refusal, reported below
                cause = _cause(error)
                log.warning("dead-letter topic %s refused %d record(s) (attempt %d of %d): %s",
                            topic, errors, attempt, DEAD_LETTER_ATTEMPTS, cause)
                if attempt < DEAD_LETTER_ATTEMPTS:
                    time.sleep(2 ** attempt)
        return (f"{errors} undecodable record(s) not sent to dead-letter topic {topic} after "
                f"{DEAD_LETTER_ATTEMPTS} attempts (they are in value_raw): {cause}")[:1000]

    def _commit_consumer_group(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        try:
            consumer = _consumer(self.config)
            try:
                consumer.commit(offsets=[TopicPartition(self.config.kafka.topic, p, o)
                                         for p, o in sorted(offsets.items())], asynchronous=False)
            finally:
                consumer.close()
        except Exception as error:  # lag tooling only; the table holds the truth
            log.warning("could not commit offsets to consumer group %s: %s",
                        self.config.consumer_group, error)

    def _stats(self, batch: DataFrame) -> list[Any]:
        """Per Kafka partition: last offset, newest timestamp, rows, bytes and (Avro) the writer
        schema ids, in one pass over the batch."""
        aggregates = [F.max("offset").alias("last"), F.max("timestamp").alias("latest"),
                      F.count(F.lit(1)).alias("rows"),
                      F.sum(F.coalesce(F.length("key"), F.lit(0))
                            + F.coalesce(F.length("value"), F.lit(0))).alias("bytes")]
        if self.config.value.format == "avro":
            batch = frame(batch)
            aggregates.append(F.collect_set("_schema_id").alias("schema_ids"))
        return batch.groupBy("partition").agg(*aggregates).collect()

    def _write(self, rows: DataFrame, base: int, props: dict[str, str],
               outcome: dict[str, Any]) -> None:
        """Commits ``rows``; counts them and the undecodable ones in the same pass as the write
        (an observation), except when a dead-letter topic needs them first (once per batch,
        even when the commit is retried)."""
        dead_letter = self.config.dead_letter is not None and not outcome.get("dead_lettered")
        if dead_letter:
            rows = rows.persist()
        try:
            if dead_letter:
                bad = rows.filter(_undecodable(rows))
                errors = bad.count()
                if errors:
                    failure = self._send_dead_letters(bad, errors)
                    if failure is None:
                        outcome["dead_letters"] = errors
                    else:
                        outcome["dead_letter_error"] = failure
                outcome["dead_lettered"] = True
            if outcome.get("dead_letter_error"):
                props = {**props, DEAD_LETTER_ERROR: outcome["dead_letter_error"]}
            if self.upsert is not None:
                rows = rows.persist()
                try:
                    errors = rows.filter(_undecodable(rows)).count()
                    outcome.update(self.committer.commit(rows, base, props, self.upsert))
                    outcome["written"] = int(outcome.pop("applied"))
                    outcome["errors"] = errors
                finally:
                    rows.unpersist()
                return
            observation = Observation(f"floe_{uuid.uuid4().hex}")
            observed = rows.observe(
                observation, F.count(F.lit(1)).alias("rows"),
                F.coalesce(F.sum(F.when(_undecodable(rows), 1).otherwise(0)),
                           F.lit(0)).alias("errors"))
            outcome.update(self.committer.commit(observed, base, props))
            counted = observation.get
            outcome["written"] = int(counted["rows"])
            outcome["errors"] = int(counted["errors"])
        finally:
            if dead_letter:
                rows.unpersist()

    def _batch_offsets(self, batch_id: int, stats: list[Any]) -> tuple[dict[int, int] | None,
                                                                       dict[int, int]]:
        """Where the batch starts and ends, from Spark's offset log.  The ends cover records
        the batch does not see (transaction markers, aborted or compacted records), so the
        next batch starts exactly where the table says this one ended."""
        location, topic = self.config.checkpoint_location, self.config.kafka.topic
        previous_id, previous_end = self.previous_end
        start = (previous_end if previous_id == batch_id - 1 and previous_end is not None
                 else checkpoint.start_offsets(self.spark, location, topic, batch_id))
        end = checkpoint.end_offsets(self.spark, location, topic, batch_id)
        self.previous_end = (batch_id, end)
        seen = {int(r["partition"]): int(r["last"]) + 1 for r in stats}
        return start, merge_offsets(seen, end or {})

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        batch = batch.persist()
        try:
            stats = self._stats(batch)
            stats_seconds = time.monotonic() - started
            start, batch_next = self._batch_offsets(batch_id, stats)
            if not batch_next:
                return
            latest = [int(r["latest"].timestamp() * 1000) for r in stats]
            vtts = min(latest) if latest else None
            schema_ids = sorted({i for r in stats for i in (r["schema_ids"] or [])}
                                if stats and "schema_ids" in stats[0] else set())
            outcome: dict[str, Any] = {"written": 0, "errors": 0, "dead_letters": 0,
                                       "write_seconds": 0.0, "commit_seconds": 0.0}

            def attempt() -> None:
                table = self.catalog.load_table(self.config.table.identifier)
                base = table.current_snapshot().snapshot_id  # offsets below are read from here
                committed = last_commit(table, self.config.writer, self.config.kafka.topic)
                ahead = checkpoint.ahead_of(start or {}, committed.offsets)
                if ahead:
                    raise CheckpointAhead(
                        f"CheckpointAhead: batch {batch_id} of {self.config.writer} would start "
                        f"above the table's offsets ({'; '.join(ahead)}); main was rolled "
                        f"back or the table replaced: the job starts again from the table")
                known = F.create_map(*[F.lit(x) for p, o in committed.offsets.items()
                                       for x in (p, o)]) if committed.offsets else None
                fresh = batch if known is None else batch.filter(
                    F.col("offset") >= F.coalesce(known[F.col("partition")], F.lit(0)))
                offsets = merge_offsets(committed.offsets, batch_next)
                if offsets == committed.offsets:
                    log.info("batch %d of %s: already committed in snapshot %s", batch_id,
                             self.config.writer, committed.snapshot_id)
                    return
                newest = [t for t in (vtts, committed.vtts) if t is not None]
                props = summary_properties(
                    self.config.writer, self.config.kafka.topic, offsets,
                    max(newest) if newest else None, self.config.generation, batch_id)
                self._write(self._decode(fresh, table, schema_ids), base, props, outcome)
                outcome["offsets"] = offsets

            conflicts = commit_with_retries(attempt)
            if "offsets" in outcome:
                self._commit_consumer_group(outcome["offsets"])
            seconds = time.monotonic() - started
            input_bytes = sum(int(r["bytes"] or 0) for r in stats)
            log.info(json.dumps({
                "event": "floe.batch", "writer": self.config.writer, "batch": batch_id,
                "input_rows": sum(int(r["rows"]) for r in stats), "rows": outcome["written"],
                "bytes": input_bytes, "bytes_per_second": round(input_bytes / seconds, 1),
                "decode_failures": outcome["errors"], "dead_letters": outcome["dead_letters"],
                "conflicts": conflicts, "stats_seconds": round(stats_seconds, 3),
                "write_seconds": round(outcome["write_seconds"], 3),
                "commit_seconds": round(outcome["commit_seconds"], 3),
                "seconds": round(seconds, 3)}))
        finally:
            batch.unpersist()


def start(config: JobConfig, spark: SparkSession | None = None, *,
          available_now: bool = False, query_name: str | None = None) -> Any:
    """Starts the streaming query; returns it (``available_now`` stops once caught up)."""
    spark = spark or build_session(config)
    for key, value in spark_catalog_conf(config).items():
        spark.conf.set(key, value)
    metrics.register(spark)
    registry = _registry(config)
    table = prepare_table(config, registry)
    if config.table.mode in ROW_LEVEL:
        table = with_deletion_vectors(
            spark, f"{config.table.catalog.name}.{config.table.identifier}", table)
    claim_table(table, config.writer)
    try:
        swept = sweep_branches(table, config.writer)
        if swept:
            log.info("dropped %d branch(es) left by interrupted batches: %s", len(swept),
                     ", ".join(swept))
    except Exception as error:  # noqa: BLE001 - a left branch only pins its snapshot
        log.warning("could not drop the branches of interrupted batches: %s", error)
    committed = last_commit(table, config.writer, config.kafka.topic)
    check_offsets_available(config, committed)
    partitions = topic_partitions(config)
    start_at = starting_offsets(config, committed, partitions)  # unless a checkpoint resumes
    if not rewind_checkpoint(spark, config, committed, partitions) and committed.offsets:
        log.info("no checkpoint at %s: starting from the table's offsets %s",
                 config.checkpoint_location, committed.offsets)
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
              .option("subscribe", config.kafka.topic)
              .option("startingOffsets", start_at)
              .option("kafka.isolation.level", config.kafka.isolation_level)
              .option("includeHeaders", "true")
              .option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", str(config.commit.max_records_per_commit)))
    for key, value in kafka_client_settings(config).items():
        reader = reader.option(f"kafka.{key}", value)
    writer = (reader.load().writeStream
              .foreachBatch(BatchWriter(config, spark, registry))
              .option("checkpointLocation", config.checkpoint_location)
              .queryName(query_name or f"floe_{config.writer.replace('/', '_').replace('-', '_')}"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.commit.interval_seconds} seconds")
    return writer.start()


# Spark 4.1's Kafka source throws this from its progress metrics right after it replays a batch
# from the offset log (a restart after a crash between planning and committing a batch).  The
# batch itself has run and been committed by then, so starting the query again moves on.
_REPLAY_METRICS_BUG = "KafkaMicroBatchStream.metrics"


def run(config: JobConfig, spark: SparkSession | None = None, *, available_now: bool = False,
        timeout: float | None = None, restarts: int = 3) -> None:
    """Runs the query until it stops (``available_now``) or fails; raises what it failed with.

    A query stopped by :class:`CheckpointAhead` starts again, from the table's offsets.  SIGTERM
    stops the query and returns (a batch it interrupts is simply not committed)."""
    terminated = _StopOnSigterm()
    for attempt in range(restarts + 1):
        query = start(config, spark, available_now=available_now)
        terminated.watch(query)
        try:
            finished = query.awaitTermination(timeout)
        except StreamingQueryException:
            finished = True
        if not finished:
            query.stop()
        if terminated.signalled:
            log.info("stopped by SIGTERM")
            return
        error = query.exception()
        if error is None:
            return
        trace = _java_stack_trace(query)
        if "CheckpointAhead: " in str(error) or "CheckpointAhead: " in trace:
            log.warning("restarting the query from the table's offsets (attempt %d of %d): %s",
                        attempt + 1, restarts, str(error).splitlines()[0][:300])
            continue
        if _REPLAY_METRICS_BUG in trace:
            log.warning("restarting the query after Spark's replay metrics failure "
                        "(attempt %d of %d)", attempt + 1, restarts)
            continue
        lost = _data_loss(config)
        if lost is not None:
            raise lost from error
        raise error
    raise RuntimeError(f"query kept failing after {restarts} restarts")


def _data_loss(config: JobConfig, tries: int = 5, pause: float = 3) -> DataLossError | None:
    """Whether a failed query ran into lost records: the topic deleted and created again, or
    retention deleting what the table has not got, while the query ran. Spark's Kafka source
    fails on these in its own words; the job then says DataLoss, as it does when it finds them
    at its start, so that it is not restarted only to stop again.  A topic being deleted and
    created again may be missing for a moment: asked again a few times."""
    for attempt in range(tries):
        try:
            table = catalogs.load_catalog(config.table.catalog).load_table(
                config.table.identifier)
            check_offsets_available(config, last_commit(table, config.writer,
                                                        config.kafka.topic))
            return None
        except DataLossError as error:
            return error
        except Exception as error:  # noqa: BLE001 - cannot tell yet
            log.warning("could not check Kafka's offsets against the table's (%d of %d): %s",
                        attempt + 1, tries, str(error).splitlines()[0][:300])
            time.sleep(pause)
    return None  # the query's own failure stands


class _StopOnSigterm:
    """Stops the watched query on SIGTERM, also one started after the signal came.  Only the
    main thread can take signals: elsewhere it never fires."""

    def __init__(self) -> None:
        import signal
        import threading

        self.signalled = False
        self.query: Any = None
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        import threading

        self.signalled = True
        if self.query is not None:  # not from the handler: the main thread waits on the query
            threading.Thread(target=self.query.stop, daemon=True).start()

    def watch(self, query: Any) -> None:
        self.query = query
        if self.signalled:
            query.stop()


def _java_stack_trace(query: Any) -> str:
    failure = query._jsq.exception()
    if not failure.isDefined():
        return ""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    return str(jvm.org.apache.commons.lang3.exception.ExceptionUtils.getStackTrace(failure.get()))
