package dev.floe.check;

/** UTF-8 as RFC 3629 has it: no overlong form, no surrogate, nothing past U+10FFFF. */
final class Utf8 {
  private Utf8() {}

  /** Why {@code bytes[from, to)} is not UTF-8, or null when it is. */
  static String problem(byte[] bytes, int from, int to) {
    int i = from;
    while (i < to) {
      int b = bytes[i] & 0xff;
      if (b < 0x80) {
        i++;
        continue;
      }
      int more;
      int min;
      int code;
      if (b >= 0xc2 && b < 0xe0) {
        more = 1;
        min = 0x80;
        code = b & 0x1f;
      } else if (b >= 0xe0 && b < 0xf0) {
        more = 2;
        min = 0x800;
        code = b & 0x0f;
      } else if (b >= 0xf0 && b < 0xf5) {
        more = 3;
        min = 0x10000;
        code = b & 0x07;
      } else {
        return String.format("byte 0x%02x at %d cannot start a character", b, i - from);
      }
      if (i + more >= to) {
        return String.format("the character at %d is cut short", i - from);
      }
      for (int k = 1; k <= more; k++) {
        int c = bytes[i + k] & 0xff;
        if ((c & 0xc0) != 0x80) {
          return String.format("byte 0x%02x at %d does not continue a character", c, i + k - from);
        }
        code = (code << 6) | (c & 0x3f);
      }
      if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
        return String.format("the character at %d is an overlong form, a surrogate or past "
            + "U+10FFFF", i - from);
      }
      i += more + 1;
    }
    return null;
  }
}
