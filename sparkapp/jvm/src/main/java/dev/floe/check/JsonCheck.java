package dev.floe.check;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;

/**
 * Checks a JSON value (after {@code offset} bytes of framing) for what Spark's JSON reader lets
 * through: bytes that are not UTF-8 (read as U+FFFD, so the table would hold other text) and
 * anything after the document (never read).
 *
 * <p>Returns null for a null value, else a row of {@code error} (why the value cannot be taken,
 * null when it can) and {@code trailing} (1 when something other than white space follows the
 * document, else 0). A value that is not JSON at all answers neither: Spark's reader refuses it
 * too, and its reason stands.
 */
public final class JsonCheck implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  private static final JsonFactory FACTORY = new JsonFactory();

  private final int offset;

  /** @param offset the framing before the document (5 in the Confluent wire format, else 0) */
  public JsonCheck(int offset) {
    this.offset = offset;
  }

  /** This check as a Spark UDF (bound here, where the compiler picks the UDF1 overload). */
  public UserDefinedFunction asUdf() {
    return functions.udf(this, AvroCheck.TYPE);
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    if (value.length < offset) {
      return RowFactory.create(null, 0);
    }
    String problem = Utf8.problem(value, offset, value.length);
    if (problem != null) {
      return RowFactory.create("it is not UTF-8, as JSON must be (" + problem + ")", 0);
    }
    try (JsonParser parser = FACTORY.createParser(value, offset, value.length - offset)) {
      if (parser.nextToken() == null) {
        return RowFactory.create(null, 0);
      }
      parser.skipChildren();
      try {
        return RowFactory.create(null, parser.nextToken() == null ? 0 : 1);
      } catch (IOException e) {
        return RowFactory.create(null, 1);  // not JSON after the document: still after it
      }
    } catch (IOException e) {
      return RowFactory.create(null, 0);
    }
  }
}
