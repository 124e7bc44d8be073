package dev.floe.check;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Checks an Avro value in the Confluent wire format (magic byte, 4-byte schema id, the value)
 * against its writer schema for what Avro's own decoder lets through: an int written with more
 * than 32 bits or a long with more than 64 (the decoder drops the high bits and reads another
 * number), a string that is not UTF-8 (read as its bytes, so the table would hold them), and
 * bytes after the value's end (never read).
 *
 * <p>Returns null for a null value, else a row of {@code error} (why the value cannot be taken,
 * null when it can) and {@code trailing} (the bytes after the value, 0 when none). A value the
 * walk cannot finish (truncated, a union branch or enum symbol out of range) answers neither:
 * Avro's decoder refuses it too, and its reason stands.
 */
public final class AvroCheck implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  private static final int HEADER_BYTES = 5;
  public static final StructType TYPE = new StructType()
      .add("error", DataTypes.StringType)
      .add("trailing", DataTypes.IntegerType);

  private final String writerSchema;
  private transient Schema schema;

  public AvroCheck(String writerSchema) {
    this.writerSchema = writerSchema;
  }

  /** This check as a Spark UDF (bound here, where the compiler picks the UDF1 overload). */
  public UserDefinedFunction asUdf() {
    return functions.udf(this, TYPE);
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    if (schema == null) {
      schema = new Schema.Parser().setValidateDefaults(false).parse(writerSchema);
    }
    Walk walk = new Walk(value, HEADER_BYTES);
    try {
      walk.read(schema);
    } catch (Malformed e) {
      return RowFactory.create(e.getMessage(), 0);
    } catch (Unfinished | ArrayIndexOutOfBoundsException e) {
      return RowFactory.create(null, 0);
    }
    return RowFactory.create(null, value.length - walk.pos);
  }

  /** A value Avro decodes into something other than what was written. */
  static final class Malformed extends Exception {
    private static final long serialVersionUID = 1L;

    Malformed(String message) {
      super(message, null, false, false);
    }
  }

  /** A value Avro's decoder refuses itself. */
  static final class Unfinished extends Exception {
    private static final long serialVersionUID = 1L;

    Unfinished() {
      super(null, null, false, false);
    }
  }

  /** Reads a value's bytes as Avro's binary encoding lays them out, keeping the field path. */
  private static final class Walk {
    private final byte[] bytes;
    private final Deque<String> path = new ArrayDeque<>();
    int pos;

    Walk(byte[] bytes, int pos) {
      this.bytes = bytes;
      this.pos = pos;
    }

    void read(Schema schema) throws Malformed, Unfinished {
      switch (schema.getType()) {
        case NULL:
          return;
        case BOOLEAN:
          skip(1);
          return;
        case INT:
          varint(5, "an int written with more than 32 bits");
          return;
        case LONG:
          varint(10, "a long written with more than 64 bits");
          return;
        case FLOAT:
          skip(4);
          return;
        case DOUBLE:
          skip(8);
          return;
        case FIXED:
          skip(schema.getFixedSize());
          return;
        case BYTES:
          skip(length());
          return;
        case STRING:
          utf8(length());
          return;
        case ENUM:
          int symbol = (int) varint(5, "an enum index written with more than 32 bits");
          if (symbol < 0 || symbol >= schema.getEnumSymbols().size()) {
            throw new Unfinished();
          }
          return;
        case RECORD:
          for (Schema.Field field : schema.getFields()) {
            path.addLast(field.name());
            read(field.schema());
            path.removeLast();
          }
          return;
        case UNION:
          List<Schema> branches = schema.getTypes();
          long branch = varint(10, "a union branch written with more than 64 bits");
          if (branch < 0 || branch >= branches.size()) {
            throw new Unfinished();
          }
          read(branches.get((int) branch));
          return;
        case ARRAY:
          blocks(schema.getElementType(), null);
          return;
        case MAP:
          blocks(schema.getValueType(), Schema.create(Schema.Type.STRING));
          return;
        default:
          throw new Unfinished();
      }
    }

    /** An array's or map's blocks: a count (negative: its size in bytes follows), its items. */
    private void blocks(Schema item, Schema key) throws Malformed, Unfinished {
      path.addLast("[]");
      while (true) {
        long count = varint(10, "a block count written with more than 64 bits");
        if (count == 0) {
          break;
        }
        if (count < 0) {
          count = -count;
          varint(10, "a block size written with more than 64 bits");
        }
        for (long i = 0; i < count; i++) {
          if (key != null) {
            read(key);
          }
          read(item);
        }
      }
      path.removeLast();
    }

    /** A zig-zag varint of at most {@code maxBytes}; its last byte must fit what is left. */
    private long varint(int maxBytes, String tooWide) throws Malformed, Unfinished {
      long raw = 0;
      for (int i = 0; i < maxBytes; i++) {
        int b = bytes[pos++] & 0xff;
        raw |= (long) (b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
          int spare = 7 * maxBytes - (maxBytes == 5 ? 32 : 64);  // bits past the type's width
          if (i == maxBytes - 1 && (b >> (7 - spare)) != 0) {
            throw new Malformed(where() + "is " + tooWide + ", which Avro's decoder reads as "
                + "another number");
          }
          return (raw >>> 1) ^ -(raw & 1);
        }
      }
      throw new Unfinished();  // Avro's decoder refuses a longer varint itself
    }

    private int length() throws Unfinished, Malformed {
      long length = varint(10, "a length written with more than 64 bits");
      if (length < 0 || length > bytes.length - pos) {
        throw new Unfinished();
      }
      return (int) length;
    }

    private void skip(int n) throws Unfinished {
      if (n > bytes.length - pos) {
        throw new Unfinished();
      }
      pos += n;
    }

    /** Skips {@code n} bytes that must be UTF-8. */
    private void utf8(int n) throws Malformed, Unfinished {
      skip(n);
      String problem = Utf8.problem(bytes, pos - n, pos);
      if (problem != null) {
        throw new Malformed(where() + "is not UTF-8 (" + problem + ")");
      }
    }

    private String where() {
      return path.isEmpty() ? "it " : "field " + String.join(".", path).replace(".[]", "[]") + " ";
    }

  }
}
