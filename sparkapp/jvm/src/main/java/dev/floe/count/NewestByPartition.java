package dev.floe.count;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import scala.Tuple2;

/**
 * The newest record timestamp of each Kafka partition among a batch's rows, as an aggregate:
 * of (partition, timestamp in ms) pairs, the text {@code partition:millis} per partition,
 * comma-separated (empty for no rows).  One hash map update a row, where Spark's own
 * aggregates would need a {@code max} per partition, each evaluated for every row.
 */
public final class NewestByPartition
    extends Aggregator<Tuple2<Integer, Long>, NewestByPartition.Newest, String> {
  private static final long serialVersionUID = 1L;

  /** The aggregation buffer: the newest timestamp seen per partition. */
  public static final class Newest implements Serializable {
    private static final long serialVersionUID = 1L;
    final HashMap<Integer, Long> byPartition = new HashMap<>();

    void add(int partition, long millis) {
      byPartition.merge(partition, millis, Math::max);
    }
  }

  /** This aggregate as a Spark function of two columns, the partition and the timestamp. */
  public UserDefinedFunction asUdf() {
    return functions.udaf(this, Encoders.tuple(Encoders.INT(), Encoders.LONG()));
  }

  @Override
  public Newest zero() {
    return new Newest();
  }

  @Override
  public Newest reduce(Newest buffer, Tuple2<Integer, Long> row) {
    if (row._1() != null && row._2() != null) {
      buffer.add(row._1(), row._2());
    }
    return buffer;
  }

  @Override
  public Newest merge(Newest left, Newest right) {
    for (Map.Entry<Integer, Long> entry : right.byPartition.entrySet()) {
      left.add(entry.getKey(), entry.getValue());
    }
    return left;
  }

  @Override
  public String finish(Newest buffer) {
    StringBuilder text = new StringBuilder();
    for (Map.Entry<Integer, Long> entry : buffer.byPartition.entrySet()) {
      if (text.length() > 0) {
        text.append(',');
      }
      text.append(entry.getKey()).append(':').append(entry.getValue());
    }
    return text.toString();
  }

  @Override
  public Encoder<Newest> bufferEncoder() {
    return Encoders.javaSerialization(Newest.class);
  }

  @Override
  public Encoder<String> outputEncoder() {
    return Encoders.STRING();
  }
}
