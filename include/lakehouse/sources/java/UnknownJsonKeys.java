package lakehouse.sources;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonFactoryBuilder;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
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
 * word. This is the one tokenization of every line that bronze needs anyway (to find keys outside
 * the schema), which also makes sure nothing but whitespace follows the object. It reads with the
 * features of {@code from_json}'s defaults (single quotes, NaN and Infinity) and none of Jackson's
 * size limits, so a line {@code from_json} reads in full is one object here too.
 *
 * <p>Arguments: the line, and the schema's names joined by NUL characters (a literal: the set
 * is built once per task and names).
 */
public final class UnknownJsonKeys implements UDF2<String, String, Integer> {
  private static final long serialVersionUID = 1L;
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

  /** The names last seen and their set, swapped as one reference. */
  private static final class Names {
    final String joined;
    final Set<String> set;

    Names(String joined) {
      this.joined = joined;
      this.set = new HashSet<>(Arrays.asList(joined.split("\0", -1)));
    }
  }

  private transient volatile Names names;

  @Override
  public Integer call(String line, String known) {
    if (line == null) {
      return null;
    }
    Names current = names;
    if (current == null || !current.joined.equals(known)) {
      current = new Names(known);
      names = current;
    }
    try (JsonParser parser = FACTORY.createParser(line)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      int unknown = 0;
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        if (!current.set.contains(parser.currentName())) {
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
