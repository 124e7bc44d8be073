package dev.floe.lineage;

import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A batch's landing time (microseconds since the epoch), held by the function rather than
 * written into the plan as a literal: Spark inlines a long literal into the code it generates,
 * so a new value each batch made new code to compile each batch; a function object is passed
 * to the same code by reference.
 */
public final class IngestTime implements UDF0<Long> {
  private static final long serialVersionUID = 1L;
  private final long micros;

  public IngestTime(long micros) {
    this.micros = micros;
  }

  @Override
  public Long call() {
    return micros;
  }

  /** This function as a Spark UDF of no column, never null. */
  public UserDefinedFunction asUdf() {
    return functions.udf(this, DataTypes.LongType).asNonNullable();
  }
}
