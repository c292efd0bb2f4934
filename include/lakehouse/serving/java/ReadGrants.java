package lakehouse.serving;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.util.Collections;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.SparkSecurityException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.CurrentUserContext;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.Identifier;
import scala.Option;
import scala.Product;

/**
 * Which catalog tables each SQL user may read: the operator's grants file
 * ({@code LAKEHOUSE_SQL_GRANTS_FILE}), resolved to table names by {@code lakehouse serve}
 * ({@code lakehouse.serving.grants}) into the JSON file named by the system property {@link
 * #FILE}: {@code {"user": ["gold.t", ...], "*": [...]}}, {@code "*"} for users not named.
 *
 * <p>Checked on every analyzed plan of a statement that has a user (the Thrift server's sessions):
 * every table the plan names (a scan's catalog table, a DESCRIBE's or SHOW's table) must be
 * granted to the user. Spark's and Delta's internal plans (reading a table's log) name no catalog
 * table. The file is re-read when it changes; one that cannot be read grants nothing.
 */
final class ReadGrants {
  static final String FILE = "lakehouse.sql.grantsFile";
  private static final String ANYONE = "*";
  private static final ObjectMapper JSON = new ObjectMapper();

  private record Loaded(String path, long modified, long size, Map<String, Set<String>> byUser, String error) {}

  private static volatile Loaded loaded;

  private ReadGrants() {}

  /** The tables the statement's user may read, or null when no grants apply (no file, no user). */
  static Set<String> forCurrentUser() {
    String path = System.getProperty(FILE);
    String user = CurrentUserContext.CURRENT_USER().get();
    if (path == null || path.isBlank() || user == null) {
      return null;
    }
    return forUser(path, user);
  }

  /** The tables {@code user} may read under the resolved grants file {@code path}. */
  static Set<String> forUser(String path, String user) {
    Loaded grants = load(path);
    if (grants.error() != null) {
      throw denied("the server's read grants cannot be read (" + grants.error()
          + "), so no table may be read; an operator must fix LAKEHOUSE_SQL_GRANTS_FILE");
    }
    Set<String> tables = grants.byUser().get(user);
    if (tables == null) {
      tables = grants.byUser().getOrDefault(ANYONE, Collections.emptySet());
    }
    return tables;
  }

  private static Loaded load(String path) {
    File file = new File(path);
    long modified = file.lastModified();
    long size = file.length();
    Loaded current = loaded;
    if (current != null && current.path().equals(path) && current.modified() == modified && current.size() == size) {
      return current;
    }
    Loaded fresh;
    try {
      Map<String, Set<String>> byUser = new HashMap<>();
      JsonNode root = JSON.readTree(file);
      for (Map.Entry<String, JsonNode> entry : root.properties()) {
        Set<String> tables = new TreeSet<>();
        for (JsonNode table : entry.getValue()) {
          tables.add(table.asText().toLowerCase(Locale.ROOT));
        }
        byUser.put(entry.getKey(), Collections.unmodifiableSet(tables));
      }
      fresh = new Loaded(path, modified, size, byUser, null);
    } catch (Exception e) {
      fresh = new Loaded(path, modified, size, Collections.emptyMap(), e.getClass().getSimpleName());
    }
    loaded = fresh;
    return fresh;
  }

  /** Refuse the plan when it names a table outside {@code granted}. */
  static void check(SparkSession session, LogicalPlan plan, Set<String> granted) {
    new Walk(session, granted).plan(plan);
  }

  /** A name the user asked for by text (table_changes('gold.t', 0)): refused unless granted. */
  static void checkName(SparkSession session, String name, Set<String> granted) {
    String[] parts = name.toLowerCase(Locale.ROOT).replace("`", "").split("\\.");
    String table = parts[parts.length - 1];
    String database =
        parts.length > 1 ? parts[parts.length - 2] : session.sessionState().catalog().getCurrentDatabase();
    require(database + "." + table, granted);
  }

  /**
   * SHOW TABLE EXTENDED lists each matching table's schema, location and properties: every table
   * it would list must be granted.
   */
  static void checkShowExtended(SparkSession session, org.apache.spark.sql.execution.command.ShowTablesCommand show,
      Set<String> granted) {
    String database = show.databaseName().isDefined() ? show.databaseName().get()
        : session.sessionState().catalog().getCurrentDatabase();
    String pattern = show.tableIdentifierPattern().isDefined() ? show.tableIdentifierPattern().get() : "*";
    for (TableIdentifier id : scala.jdk.javaapi.CollectionConverters.asJava(
        session.sessionState().catalog().listTables(database, pattern))) {
      String db = id.database().isDefined() ? id.database().get() : database;
      require((db + "." + id.table()).toLowerCase(Locale.ROOT), granted);
    }
  }

  /**
   * A JDBC client's column metadata request (Thrift GetColumns, which no SQL parser sees): every
   * table its patterns match must be granted to {@code user}, or it would list their columns.
   */
  static void checkColumnsRequest(String user, String schemaPattern, String tablePattern) {
    String path = System.getProperty(FILE);
    if (path == null || path.isBlank() || user == null) {
      return;
    }
    Set<String> granted = forUser(path, user);
    SparkSession session = SparkSession.getDefaultSession().get();
    org.apache.spark.sql.catalyst.catalog.SessionCatalog catalog = session.sessionState().catalog();
    java.util.regex.Pattern schemas = jdbcPattern(schemaPattern);
    java.util.regex.Pattern tables = jdbcPattern(tablePattern);
    for (String database : scala.jdk.javaapi.CollectionConverters.asJava(catalog.listDatabases())) {
      if (!schemas.matcher(database).matches()) {
        continue;
      }
      for (TableIdentifier id : scala.jdk.javaapi.CollectionConverters.asJava(catalog.listTables(database, "*"))) {
        if (tables.matcher(id.table()).matches()) {
          require(user, (database + "." + id.table()).toLowerCase(Locale.ROOT), granted);
        }
      }
    }
  }

  /** A JDBC metadata pattern (% any text, _ any character, \ escapes; null or empty: all). */
  private static java.util.regex.Pattern jdbcPattern(String pattern) {
    if (pattern == null || pattern.isEmpty() || pattern.equals("*")) {
      return java.util.regex.Pattern.compile(".*");
    }
    StringBuilder regex = new StringBuilder();
    for (int i = 0; i < pattern.length(); i++) {
      char c = pattern.charAt(i);
      if (c == '\\' && i + 1 < pattern.length()) {
        regex.append(java.util.regex.Pattern.quote(String.valueOf(pattern.charAt(++i))));
      } else if (c == '%' || c == '*') {
        regex.append(".*");
      } else if (c == '_') {
        regex.append('.');
      } else {
        regex.append(java.util.regex.Pattern.quote(String.valueOf(c)));
      }
    }
    return java.util.regex.Pattern.compile(regex.toString(), java.util.regex.Pattern.CASE_INSENSITIVE);
  }

  private static void require(String table, Set<String> granted) {
    require(CurrentUserContext.CURRENT_USER().get(), table, granted);
  }

  private static void require(String user, String table, Set<String> granted) {
    if (!granted.contains(table)) {
      throw denied(user + " may not read " + table + ": it is not in " + user + "'s read grants on this "
          + "server (" + (granted.isEmpty() ? "none" : String.join(", ", granted)) + "); an operator "
          + "grants tables, schemas or pipelines in LAKEHOUSE_SQL_GRANTS_FILE");
    }
  }

  /**
   * Not an AnalysisException: Spark appends the analyzed plan to those, and the plan of a table
   * the user may not read shows its columns and location.
   */
  static SparkSecurityException denied(String message) {
    scala.collection.immutable.Map<String, String> params =
        scala.collection.immutable.Map$.MODULE$.<String, String>empty().updated("message", message);
    return new SparkSecurityException("_LEGACY_ERROR_TEMP_0035", params, Option.empty());
  }

  /** Every table identity held by a plan's nodes and their fields (a few levels of case classes). */
  private static final class Walk {
    private final SparkSession session;
    private final Set<String> granted;

    Walk(SparkSession session, Set<String> granted) {
      this.session = session;
      this.granted = granted;
    }

    /** A plan's fields hold its children, so one walk over the fields sees the whole tree. */
    void plan(LogicalPlan plan) {
      fields(plan, 0);
    }

    private void fields(Product node, int depth) {
      scala.collection.Iterator<Object> it = node.productIterator();
      while (it.hasNext()) {
        value(it.next(), depth);
      }
    }

    private void value(Object value, int depth) {
      if (value instanceof CatalogTable) {
        identifier(((CatalogTable) value).identifier());
      } else if (value instanceof TableIdentifier) {
        identifier((TableIdentifier) value);
      } else if (value instanceof Identifier) {
        String[] namespace = ((Identifier) value).namespace();
        String database = namespace.length > 0 ? namespace[namespace.length - 1]
            : session.sessionState().catalog().getCurrentDatabase();
        require((database + "." + ((Identifier) value).name()).toLowerCase(Locale.ROOT), granted);
      } else if (value instanceof Option) {
        Option<?> o = (Option<?>) value;
        if (o.isDefined()) {
          value(o.get(), depth);
        }
      } else if (value instanceof LogicalPlan) {
        plan((LogicalPlan) value); // children, and plans held outside children (a command's query)
      } else if (value instanceof Expression) {
        expression((Expression) value);
      } else if (value instanceof scala.collection.Iterable && depth < 3) {
        scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) value).iterator();
        while (it.hasNext()) {
          value(it.next(), depth + 1);
        }
      } else if (value instanceof Product && depth < 3) {
        fields((Product) value, depth + 1); // ResolvedTable(catalog, identifier, table, ...)
      } else if (value instanceof org.apache.spark.sql.connector.catalog.Table) {
        try { // DeltaTableV2 (DESCRIBE HISTORY's table) is no case class: ask for its catalog entry
          value(value.getClass().getMethod("catalogTable").invoke(value), depth);
        } catch (ReflectiveOperationException ignored) {
          // a table without one was named by path, which the parser refuses
        }
      }
    }

    private void expression(Expression e) {
      if (e instanceof org.apache.spark.sql.catalyst.expressions.SubqueryExpression) {
        plan(((org.apache.spark.sql.catalyst.expressions.SubqueryExpression) e).plan());
      }
      for (Expression child : scala.jdk.javaapi.CollectionConverters.asJava(e.children())) {
        expression(child);
      }
    }

    private void identifier(TableIdentifier id) {
      String database = id.database().isDefined() ? id.database().get()
          : session.sessionState().catalog().getCurrentDatabase();
      require((database + "." + id.table()).toLowerCase(Locale.ROOT), granted);
    }
  }
}
