package dev.floe.protobuf;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.DescriptorProtos.DescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import java.io.IOException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes Protobuf values in the Confluent wire format (magic byte, 4-byte schema id, the
 * message-index array, the message) of one writer schema into a row of {@code type}: the
 * columns of the writer's Iceberg type (floe_sparkapp.protobuf_types), then whether the value
 * decoded and, when it has fields the writer schema does not define, a note saying so.
 *
 * <p>Fields are matched by name, so a field left out of {@code type} (a recursive one) is not
 * read. Proto3 fields without presence read as their zero value when unset; unset fields with
 * presence and unset messages are null. uint32 and fixed32 become long; uint64 and fixed64 the
 * long of the same 64 bits; enums their value's name (an unknown number as its digits);
 * google.protobuf.Timestamp an instant.
 */
public final class ProtobufDecoder implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  private static final int HEADER_BYTES = 5;
  public static final String OK = "__floe_decoded";
  public static final String NOTE = "__floe_note";

  private final byte[] descriptorSet;
  private final String messageName;
  private final byte[][] indexes;
  private final StructType type;
  private transient Descriptor descriptor;
  private transient Conversion top;

  /**
   * @param indexes the message-index encodings that name the message, as hex, comma-separated
   */
  public ProtobufDecoder(byte[] descriptorSet, String messageName, String indexes, StructType type) {
    this.descriptorSet = descriptorSet;
    this.messageName = messageName;
    String[] parts = indexes.split(",");
    this.indexes = new byte[parts.length][];
    for (int i = 0; i < parts.length; i++) {
      this.indexes[i] = hex(parts[i]);
    }
    this.type = type;
  }

  /**
   * This decoder as a Spark UDF. Bound here, where the compiler picks the typed {@code UDF1}
   * overload of {@code functions.udf}: py4j's choice among its overloads may land on the untyped
   * Scala one, which Spark refuses.
   */
  public UserDefinedFunction asUdf() {
    return functions.udf(this, type);
  }

  private static byte[] hex(String text) {
    byte[] out = new byte[text.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
    }
    return out;
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    if (top == null) {
      descriptor = find(descriptorSet, messageName);
      top = new Conversion(descriptor, dropFlags(type));
    }
    int start = -1;
    for (byte[] index : indexes) {
      if (startsWith(value, HEADER_BYTES, index)) {
        start = HEADER_BYTES + index.length;
        break;
      }
    }
    if (start < 0) {
      return failed();
    }
    DynamicMessage message;
    try {
      message = DynamicMessage.parseFrom(
          descriptor, CodedInputStream.newInstance(value, start, value.length - start));
    } catch (IOException | RuntimeException e) { // truncated, corrupt, invalid UTF-8
      return failed();
    }
    boolean[] unknown = {false};
    Object[] columns = top.columns(message, unknown);
    Object[] out = new Object[columns.length + 2];
    System.arraycopy(columns, 0, out, 0, columns.length);
    out[columns.length] = Boolean.TRUE;
    out[columns.length + 1] =
        unknown[0]
            ? "the value has fields its writer schema's " + messageName
                + " does not define; the full value is in value_raw"
            : null;
    return RowFactory.create(out);
  }

  private Row failed() {
    Object[] out = new Object[type.fields().length];
    out[out.length - 2] = Boolean.FALSE;
    return RowFactory.create(out);
  }

  private static boolean startsWith(byte[] value, int at, byte[] prefix) {
    if (value.length < at + prefix.length) {
      return false;
    }
    for (int i = 0; i < prefix.length; i++) {
      if (value[at + i] != prefix[i]) {
        return false;
      }
    }
    return true;
  }

  private static StructType dropFlags(StructType type) {
    List<StructField> kept = new ArrayList<>();
    for (StructField field : type.fields()) {
      if (!field.name().equals(OK) && !field.name().equals(NOTE)) {
        kept.add(field);
      }
    }
    return new StructType(kept.toArray(new StructField[0]));
  }

  /** The message named {@code name} in a FileDescriptorSet (protoc --include_imports). */
  static Descriptor find(byte[] descriptorSet, String name) {
    try {
      Map<String, FileDescriptor> built = new HashMap<>();
      for (FileDescriptorProto file : FileDescriptorSet.parseFrom(descriptorSet).getFileList()) {
        FileDescriptor[] dependencies = new FileDescriptor[file.getDependencyCount()];
        for (int i = 0; i < dependencies.length; i++) {
          dependencies[i] = built.get(file.getDependency(i));
        }
        FileDescriptor done = FileDescriptor.buildFrom(file, dependencies);
        built.put(file.getName(), done);
        for (Descriptor message : done.getMessageTypes()) {
          Descriptor found = find(message, name);
          if (found != null) {
            return found;
          }
        }
      }
    } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
      throw new IllegalArgumentException("not a Protobuf descriptor set: " + e.getMessage(), e);
    }
    throw new IllegalArgumentException("no message " + name + " in the descriptor set");
  }

  private static Descriptor find(Descriptor message, String name) {
    if (message.getFullName().equals(name)) {
      return message;
    }
    for (Descriptor nested : message.getNestedTypes()) {
      Descriptor found = find(nested, name);
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  /** How one message type becomes the columns of one struct type, worked out once. */
  private static final class Conversion {
    private final FieldDescriptor[] fields;
    private final Value[] values;

    Conversion(Descriptor message, StructType type) {
      StructField[] columns = type.fields();
      fields = new FieldDescriptor[columns.length];
      values = new Value[columns.length];
      for (int i = 0; i < columns.length; i++) {
        FieldDescriptor field = message.findFieldByName(columns[i].name());
        if (field == null) {
          throw new IllegalArgumentException(
              message.getFullName() + " has no field " + columns[i].name());
        }
        fields[i] = field;
        values[i] = field(field, columns[i].dataType());
      }
    }

    Object[] columns(DynamicMessage message, boolean[] unknown) {
      if (!message.getUnknownFields().asMap().isEmpty()) {
        unknown[0] = true;
      }
      Object[] out = new Object[fields.length];
      for (int i = 0; i < fields.length; i++) {
        FieldDescriptor field = fields[i];
        boolean single = !field.isRepeated();
        if (single && field.hasPresence() && !message.hasField(field)) {
          continue; // unset: null
        }
        out[i] = values[i].of(message.getField(field), unknown);
      }
      return out;
    }

    Row row(Object message, boolean[] unknown) {
      return RowFactory.create(columns((DynamicMessage) message, unknown));
    }
  }

  private interface Value {
    Object of(Object value, boolean[] unknown);
  }

  private static Value field(FieldDescriptor field, DataType type) {
    if (field.isMapField()) {
      MapType map = (MapType) type;
      Descriptor entry = field.getMessageType();
      FieldDescriptor keyField = entry.findFieldByName("key");
      FieldDescriptor valueField = entry.findFieldByName("value");
      Value key = single(keyField, map.keyType());
      Value item = single(valueField, map.valueType());
      return (value, unknown) -> {
        Map<Object, Object> out = new LinkedHashMap<>();
        for (Object element : (List<?>) value) {
          DynamicMessage pair = (DynamicMessage) element;
          out.put(key.of(pair.getField(keyField), unknown),
              item.of(pair.getField(valueField), unknown));
        }
        return out;
      };
    }
    if (field.isRepeated()) {
      Value element = single(field, ((ArrayType) type).elementType());
      return (value, unknown) -> {
        List<?> items = (List<?>) value;
        List<Object> out = new ArrayList<>(items.size());
        for (Object item : items) {
          out.add(element.of(item, unknown));
        }
        return out;
      };
    }
    return single(field, type);
  }

  private static Value single(FieldDescriptor field, DataType type) {
    switch (field.getJavaType()) {
      case INT:
        if (field.getType() == FieldDescriptor.Type.UINT32
            || field.getType() == FieldDescriptor.Type.FIXED32) {
          return (value, unknown) -> Integer.toUnsignedLong((Integer) value);
        }
        return (value, unknown) -> value;
      case BYTE_STRING:
        return (value, unknown) -> ((ByteString) value).toByteArray();
      case ENUM:
        return (value, unknown) -> {
          EnumValueDescriptor symbol = (EnumValueDescriptor) value;
          return field.getEnumType().findValueByNumber(symbol.getNumber()) == null
              ? Integer.toString(symbol.getNumber())
              : symbol.getName();
        };
      case MESSAGE:
        Descriptor message = field.getMessageType();
        if (message.getFullName().equals("google.protobuf.Timestamp")) {
          FieldDescriptor seconds = message.findFieldByNumber(1);
          FieldDescriptor nanos = message.findFieldByNumber(2);
          return (value, unknown) -> {
            DynamicMessage time = (DynamicMessage) value;
            return Instant.ofEpochSecond(
                (Long) time.getField(seconds), (Integer) time.getField(nanos));
          };
        }
        Conversion nested = new Conversion(message, (StructType) type);
        return nested::row;
      default: // LONG (uint64 and fixed64 as the same bits), FLOAT, DOUBLE, BOOLEAN, STRING
        return (value, unknown) -> value;
    }
  }
}
