package lakehouse.sources;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonFactoryBuilder;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.api.java.UDF2;

/**
 * How many of a line's keys are not among the schema's names, or null unless the line holds
 * exactly one JSON object: the keys bronze rescues, and a check Spark's JSON functions lack.
 *
 * <p>Spark's {@code from_json}, {@code json_object_keys} and JSON reader read a line's first value
 * and ignore what follows it, so {@code {"a":1} {"b":2}} (two records written without a line
 * break between them) parses as {@code {"a":1}} and the second record would be lost without a
 * word. This is the one extra look at every line that bronze needs anyway (to find keys outside
 * the schema), which also makes sure nothing but whitespace follows the object.
 *
 * <p>Two ways, one answer. A scan of the line's UTF-8 bytes finds the object's top-level keys and
 * its end, stepping over values without reading them (strings by their quotes and escapes,
 * objects and arrays by their brackets): bronze's lines are {@code from_json}'s to judge, and a
 * line {@code from_json} reads is valid JSON, whose structure the scan follows exactly. Whatever
 * the scan does not take for granted (a key with an escape, anything but a key, a colon or a
 * comma where one belongs, text after the object, a line that is not an object) is tokenized
 * with Jackson instead, with the features of {@code from_json}'s defaults (single quotes, NaN and
 * Infinity) and none of Jackson's size limits, so a line {@code from_json} reads in full is one
 * object here too. Counting the unknown keys of 1M YSB lines took 1.27 JVM CPU-s with the scan,
 * 1.83 with Jackson over a decoded String (best of three each, quiet 2-core machine, 2026-12-04).
 *
 * <p>Arguments: the line's bytes, and the schema's names joined by NUL characters (a literal:
 * the names are built once per task).
 */
public final class UnknownJsonKeys implements UDF2<byte[], String, Integer> {
  private static final long serialVersionUID = 2L;
  private static final JsonFactory FACTORY =
      new JsonFactoryBuilder()
          .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES)
          .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
          // no limits of its own: a line from_json reads (or rejects itself) is never flagged here
          .streamReadConstraints(
              StreamReadConstraints.builder()
                  .maxNestingDepth(Integer.MAX_VALUE)
                  .maxNumberLength(Integer.MAX_VALUE)
                  .maxStringLength(Integer.MAX_VALUE)
                  .maxNameLength(Integer.MAX_VALUE)
                  .build())
          .build();

  /** The scan's verdict when it hands the line to Jackson. */
  private static final int UNSURE = -1;

  /** The names last seen: as strings (Jackson's keys) and as UTF-8 bytes in a hash table. */
  private static final class Names {
    final String joined;
    final Set<String> set;
    final byte[][] table;
    final int mask;

    Names(String joined) {
      this.joined = joined;
      String[] names = joined.split("\0", -1);
      this.set = new HashSet<>(Arrays.asList(names));
      int size = Integer.highestOneBit(Math.max(4, names.length * 4 - 1)) << 1;
      this.table = new byte[size][];
      this.mask = size - 1;
      for (String name : set) {
        byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
        int slot = hash(bytes, 0, bytes.length) & mask;
        while (table[slot] != null) {
          slot = (slot + 1) & mask;
        }
        table[slot] = bytes;
      }
    }

    boolean contains(byte[] line, int from, int to) {
      for (int slot = hash(line, from, to) & mask; ; slot = (slot + 1) & mask) {
        byte[] name = table[slot];
        if (name == null) {
          return false;
        }
        if (Arrays.equals(name, 0, name.length, line, from, to)) {
          return true;
        }
      }
    }

    private static int hash(byte[] bytes, int from, int to) {
      int h = to - from;
      for (int i = from; i < to; i++) {
        h = 31 * h + bytes[i];
      }
      return h ^ (h >>> 16);
    }
  }

  private transient volatile Names names;

  @Override
  public Integer call(byte[] line, String known) {
    if (line == null) {
      return null;
    }
    Names current = names;
    if (current == null || !current.joined.equals(known)) {
      current = new Names(known);
      names = current;
    }
    int unknown = scan(line, current);
    if (unknown == UNSURE) {
      return tokenized(new String(line, StandardCharsets.UTF_8), current.set);
    }
    return unknown;
  }

  /** The unknown keys of a line that is one object with plain keys and nothing after it, else UNSURE. */
  static int scan(byte[] line, Names names) {
    int n = line.length;
    int i = whitespace(line, 0);
    if (i >= n || line[i] != '{') {
      return UNSURE;
    }
    i = whitespace(line, i + 1);
    int unknown = 0;
    if (i < n && line[i] == '}') {
      return whitespace(line, i + 1) == n ? 0 : UNSURE;
    }
    while (true) {
      if (i >= n || (line[i] != '"' && line[i] != '\'')) {
        return UNSURE;
      }
      byte quote = line[i];
      int end = i + 1;
      while (end < n && line[end] != quote) {
        if (line[end] == '\\' || (line[end] >= 0 && line[end] < ' ')) {
          return UNSURE; // an escaped key (Jackson decodes it), a control character (JSON has none)
        }
        end++;
      }
      if (end >= n) {
        return UNSURE;
      }
      if (!names.contains(line, i + 1, end)) {
        unknown++;
      }
      i = whitespace(line, end + 1);
      if (i >= n || line[i] != ':') {
        return UNSURE;
      }
      i = value(line, whitespace(line, i + 1));
      if (i < 0) {
        return UNSURE;
      }
      i = whitespace(line, i);
      if (i >= n) {
        return UNSURE;
      }
      if (line[i] == '}') {
        return whitespace(line, i + 1) == n ? unknown : UNSURE;
      }
      if (line[i] != ',') {
        return UNSURE;
      }
      i = whitespace(line, i + 1);
    }
  }

  /** Where the value starting at {@code i} ends (the index after it), or -1. */
  private static int value(byte[] line, int i) {
    int n = line.length;
    if (i >= n) {
      return -1;
    }
    byte first = line[i];
    if (first == '"' || first == '\'') {
      return string(line, i);
    }
    if (first == '{' || first == '[') {
      int depth = 0;
      while (i < n) {
        byte c = line[i];
        if (c == '"' || c == '\'') {
          i = string(line, i);
          if (i < 0) {
            return -1;
          }
          continue;
        }
        if (c == '{' || c == '[') {
          depth++;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) {
            return i + 1;
          }
        }
        i++;
      }
      return -1;
    }
    // a number, true, false, null, NaN, Infinity: up to the next delimiter
    int start = i;
    while (i < n) {
      byte c = line[i];
      if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        break;
      }
      if (c == '"' || c == '\'' || c == '{' || c == '[' || c == ':') {
        return -1;
      }
      i++;
    }
    return i > start ? i : -1;
  }

  /** The index after the string whose opening quote is at {@code i}, or -1. */
  private static int string(byte[] line, int i) {
    byte quote = line[i];
    int n = line.length;
    for (i++; i < n; i++) {
      byte c = line[i];
      if (c == '\\') {
        i++;
      } else if (c == quote) {
        return i + 1;
      } else if (c >= 0 && c < ' ') {
        return -1; // a control character: not JSON (Jackson says so)
      }
    }
    return -1;
  }

  /** The first index at or after {@code i} that is not JSON whitespace. */
  private static int whitespace(byte[] line, int i) {
    int n = line.length;
    while (i < n) {
      byte c = line[i];
      if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
        break;
      }
      i++;
    }
    return i;
  }

  /** Jackson's answer: the unknown keys of a line that is exactly one object, else null. */
  static Integer tokenized(String line, Set<String> names) {
    try (JsonParser parser = FACTORY.createParser(line)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      int unknown = 0;
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        if (!names.contains(parser.currentName())) {
          unknown++;
        }
        parser.nextToken();
        parser.skipChildren();
      }
      return parser.nextToken() == null ? unknown : null;
    } catch (IOException notOneObject) {
      return null;
    }
  }
}
