package lakehouse.serving;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.WeakHashMap;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.ExpressionWithUnresolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.PlanWithUnresolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.analysis.UnresolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTable;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableOrView;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableValuedFunction;
import org.apache.spark.sql.catalyst.analysis.UnresolvedView;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedHint;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.execution.command.DescribeQueryCommand;
import org.apache.spark.sql.execution.command.ExplainCommand;
import org.apache.spark.sql.execution.command.ResetCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.command.ShowTablesCommand;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Function1;
import scala.Option;
import scala.Product;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * Read-only SQL for analysts: a Spark session extension ({@code spark.sql.extensions}, listed
 * AFTER {@code io.delta.sql.DeltaSparkSessionExtension}) that lets a session run only queries
 * (SELECT/WITH/VALUES, time travel), SHOW, DESCRIBE, EXPLAIN, USE and SET of a few settings, on
 * catalog tables. Everything else is refused with "Operation not allowed: read-only SQL: ...".
 *
 * <p>Two checks, both in every session of the process (the Thrift server's JDBC sessions are
 * {@code newSession()}s of the serving session, so they get them too):
 *
 * <ol>
 *   <li>a parser wrapper: an allow-list of the node types of the PARSED statement, before any
 *       analysis (no file is listed, no catalog plugin is loaded, no procedure is called), plus
 *       a guard on session settings changed outside SQL (JDBC URL hive confs);
 *   <li>a check rule on every ANALYZED plan: no command but the read-only ones, no write node,
 *       no TRANSFORM, no reflection (reflect/java_method/try_reflect) or Hive UDF. It also sees
 *       Spark's and Delta's internal plans (they are analyzed in the same session), so it cannot
 *       insist on catalog relations: that part is the parser's.
 * </ol>
 *
 * <p>With read grants ({@link ReadGrants}), the check also refuses tables the statement's user
 * was not granted.
 *
 * <p>Off when the process runs with {@code -Dlakehouse.sql.allowWrites=true} or {@code
 * spark.lakehouse.sql.allowWrites=true} (SparkConf, fixed at launch), and for sessions passed to
 * {@link #trust} (the serving process's own session that registers the catalog).
 */
public final class ReadOnlySqlExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  public static final String ALLOW_WRITES = "lakehouse.sql.allowWrites";
  public static final String SETTABLE_KEY = "spark.lakehouse.sql.settableConfs";
  public static final String DEBUG = "lakehouse.sql.readonly.debug";
  /** Tests only: which checks run ("parser,check" by default), to test each on its own. */
  public static final String LAYERS = "lakehouse.sql.readonly.layers";
  private static final String RUN_SQL_ON_FILES = "spark.sql.runSQLOnFiles";
  /** Set by the server (engine.serving_settings) for queries; metadata statements use Spark's own. */
  private static final String LEAF_PARALLELISM = "spark.sql.leafNodeDefaultParallelism";
  private static final String PREFIX = "read-only SQL: ";
  private static final String WHAT_IS_ALLOWED =
      "analysts may run SELECT/WITH (time travel included), SHOW, DESCRIBE, EXPLAIN, USE and SET of "
          + "a few settings, on catalog tables";

  /** Sessions that may write (the serving process's own catalog sync). Identity, weakly held. */
  private static final Set<Object> TRUSTED = Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

  public static void trust(SparkSession session) {
    TRUSTED.add(session);
  }

  /**
   * True when this extension's parser is in the session (spark.sql.extensions took effect); with
   * the analyzed-plan layer alone (tests), when the extension was applied at all.
   */
  public static boolean isInstalled(SparkSession session) {
    if (!layers().contains("parser")) {
      return applied; // tests of the analyzed-plan layer alone: no parser to recognize
    }
    return session.sessionState().sqlParser() instanceof GuardedParser;
  }

  private static volatile boolean applied;

  private static String layers() {
    return System.getProperty(LAYERS, "parser,check");
  }

  public static boolean isReadOnly(SparkSession session) {
    if (Boolean.getBoolean(ALLOW_WRITES)) {
      return false;
    }
    if (session.sparkContext().getConf().getBoolean("spark." + ALLOW_WRITES, false)) {
      return false;
    }
    return !TRUSTED.contains(session);
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    if (layers().contains("parser")) {
      injectParser(extensions);
    }
    if (layers().contains("check")) {
      injectCheck(extensions);
    }
    applied = true;
    return BoxedUnit.UNIT;
  }

  private static void injectParser(SparkSessionExtensions extensions) {
    extensions.injectParser(
        new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
          @Override
          public ParserInterface apply(SparkSession session, ParserInterface delegate) {
            return new GuardedParser(session, delegate);
          }
        });
  }

  private static void injectCheck(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(
        new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
          @Override
          public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
            return new AnalyzedCheck(session);
          }
        });
  }

  // ------------------------------------------------------------------------------ policy lists

  private static final String L = "org.apache.spark.sql.catalyst.plans.logical.";
  private static final String A = "org.apache.spark.sql.catalyst.analysis.";
  private static final String C = "org.apache.spark.sql.execution.command.";
  private static final String D = "org.apache.spark.sql.delta.commands.";

  /**
   * RESET of one settable key only: a bare RESET would also reset what the guard set in the
   * session (files off), until the next statement is parsed.
   */
  static void checkReset(ResetCommand reset, Set<String> settable) {
    Option<String> key = reset.config();
    if (!key.isDefined()) {
      throw refused("RESET of every setting is not allowed; RESET one of: " + String.join(", ", settable));
    }
    if (!settable.contains(key.get())) {
      throw refused("RESET " + key.get() + " is not allowed; settable: " + String.join(", ", settable));
    }
  }

  private static Set<String> names(String prefix, String... simple) {
    Set<String> out = new HashSet<>();
    for (String s : simple) {
      out.add(s.contains(".") ? s : prefix + s);
    }
    return out;
  }

  @SafeVarargs
  private static Set<String> union(Set<String>... sets) {
    Set<String> out = new HashSet<>();
    for (Set<String> s : sets) {
      out.addAll(s);
    }
    return Collections.unmodifiableSet(out);
  }

  /** Parsed statements allowed at the root (SHOW, DESCRIBE, EXPLAIN, USE, SET, RESET). */
  static final Set<String> PARSED_STATEMENTS =
      union(
          names(L, "ShowTables", "ShowTablesExtended", "ShowViews", "ShowColumns", "ShowCreateTable",
              "ShowFunctions", "ShowPartitions", "ShowTableProperties", "ShowTablePartition",
              "DescribeRelation", "DescribeColumn", "DescribeNamespace", "DescribeFunction",
              "SetCatalogAndNamespace"),
          names(C, "ShowCatalogsCommand", "ShowCurrentNamespaceCommand", "ShowNamespacesCommand",
              "ShowCollationsCommand", "DescribeQueryCommand", "ExplainCommand", "SetCommand",
              "ResetCommand"),
          names(D, "DescribeDeltaHistory", "DescribeDeltaDetailCommand"));

  /** Parsed nodes of queries, and name references under SHOW/DESCRIBE (anywhere below the root). */
  static final Set<String> PARSED_QUERY_NODES =
      union(
          names(L, "Project", "Filter", "Aggregate", "Join", "LateralJoin", "AsOfJoin", "NearestByJoin",
              "Sort", "GlobalLimit", "LocalLimit", "Offset", "LimitAll", "Tail", "Union", "Intersect",
              "Except", "Distinct", "Deduplicate", "SubqueryAlias", "UnresolvedWith", "WithCTE",
              "CTERelationDef", "CTERelationRef", "UnionLoop", "UnionLoopRef", "Generate", "Window",
              "WithWindowDefinition", "Pivot", "Unpivot", "Transpose", "Sample", "Repartition",
              "RepartitionByExpression", "RebalancePartitions", "UnresolvedHint", "ResolvedHint",
              "Expand", "OneRowRelation", "LocalRelation", "Range", "EmptyRelation"),
          names(A, "UnresolvedRelation", "UnresolvedInlineTable", "ResolvedInlineTable",
              "RelationTimeTravel", "UnresolvedTableValuedFunction", "UnresolvedTVFAliases",
              "UnresolvedSubqueryColumnAliases", "UnresolvedHaving", "UnresolvedQualify",
              "PlanWithUnresolvedIdentifier", "NameParameterizedQuery", "PosParameterizedQuery",
              "GeneralParameterizedQuery", "UnresolvedTranspose", "UnresolvedTable",
              "UnresolvedTableOrView", "UnresolvedView", "UnresolvedNamespace", "UnresolvedIdentifier",
              "UnresolvedFunctionName", "ResolvedNamespace", "CurrentNamespace$",
              "org.apache.spark.sql.catalyst.analysis.resolver.UnresolvedCteRelationRef"),
          names(L, "org.apache.spark.sql.catalyst.expressions.PipeOperator"));

  /** Table-valued functions allowed in FROM. */
  static final Set<String> TABLE_FUNCTIONS =
      new HashSet<>(Arrays.asList("range", "explode", "explode_outer", "inline", "inline_outer",
          "posexplode", "posexplode_outer", "json_tuple", "stack", "sql_keywords",
          "variant_explode", "variant_explode_outer", "collations", "table_changes"));

  /** Functions that call arbitrary static Java methods. */
  static final Set<String> DENIED_FUNCTIONS = new HashSet<>(Arrays.asList("reflect", "java_method", "try_reflect"));

  /**
   * Options of functions (from_xml, from_avro, ...) that make the server open a file or URL an
   * analyst names: a file-existence oracle and requests to any address. Lower case.
   */
  static final Set<String> DENIED_OPTIONS =
      new HashSet<>(Arrays.asList("rowvalidationxsdpath", "avroschemaurl"));

  /**
   * Functions that take an options map. Spark evaluates the map while it analyzes the statement
   * (a time travel timestamp, an IDENTIFIER, a LIMIT fold it), before any check of the analyzed
   * plan: its keys must be constant strings the parser can read.
   */
  static final Set<String> OPTION_FUNCTIONS =
      new HashSet<>(Arrays.asList("from_json", "from_csv", "from_xml", "schema_of_json", "schema_of_csv",
          "schema_of_xml", "to_json", "to_csv", "to_xml", "from_avro", "to_avro", "from_protobuf",
          "to_protobuf"));

  /**
   * Hints whose numbers are partition counts. The server chooses those (short tasks, shared
   * fairly): REPARTITION(1000000) of a 20-row table exhausted the server's memory, COALESCE(1)
   * of a range makes one task that holds a core until the statement times out.
   */
  static final Set<String> PARTITION_HINTS =
      new HashSet<>(Arrays.asList("repartition", "coalesce", "repartition_by_range", "rebalance"));

  /** Functions whose third argument, unless a binary descriptor, names a file the server reads. */
  static final Set<String> DESCRIPTOR_FILE_FUNCTIONS = new HashSet<>(Arrays.asList("from_protobuf", "to_protobuf"));

  /** Analyzed commands allowed at the root (v1 forms for the session catalog, v2 forms otherwise). */
  static final Set<String> ANALYZED_COMMANDS =
      union(
          names(C, "ShowTablesCommand", "ShowColumnsCommand", "ShowCreateTableCommand",
              "ShowCreateTableAsSerdeCommand", "ShowPartitionsCommand", "ShowTablePropertiesCommand",
              "ShowFunctionsCommand", "ShowViewsCommand", "ShowCatalogsCommand",
              "ShowCurrentNamespaceCommand", "ShowNamespacesCommand", "ShowCollationsCommand",
              "DescribeTableCommand", "DescribeColumnCommand", "DescribeDatabaseCommand",
              "DescribeFunctionCommand", "DescribeQueryCommand", "DescribeRelationJsonCommand",
              "ExplainCommand", "SetCommand", "ResetCommand", "SetNamespaceCommand", "SetCatalogCommand"),
          names(L, "ShowTables", "ShowTablesExtended", "ShowViews", "ShowColumns", "ShowCreateTable",
              "ShowFunctions", "ShowPartitions", "ShowTableProperties", "ShowTablePartition",
              "DescribeRelation", "DescribeColumn", "DescribeNamespace", "DescribeFunction",
              "SetCatalogAndNamespace"),
          names(D, "DescribeDeltaHistoryCommand", "DescribeDeltaDetailCommand",
              "ShowDeltaTableColumnsCommand", "ShowDeltaPartitionsCommand"));

  /** Nodes that write or run code without being a Command (checked in every analyzed plan). */
  static final Set<String> ANALYZED_DENIED_NODES =
      union(
          names(L, "InsertIntoStatement", "InsertIntoDir", "ScriptTransformation", "Call", "CompoundBody",
              "RestoreTableStatement", "CloneTableStatement", "DeltaDelete", "DeltaUpdateTable", "MergeRows"),
          names("org.apache.spark.sql.execution.", "org.apache.spark.sql.execution.datasources.CreateTable",
              "org.apache.spark.sql.execution.datasources.WriteFiles",
              "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2",
              "org.apache.spark.sql.catalyst.streaming.WriteToStream",
              "org.apache.spark.sql.catalyst.streaming.WriteToStreamStatement"));

  /** Expressions that run user-chosen code. */
  static final Set<String> DENIED_EXPRESSIONS =
      names("org.apache.spark.sql.catalyst.expressions.", "CallMethodViaReflection", "TryReflect",
          "org.apache.spark.sql.hive.HiveSimpleUDF", "org.apache.spark.sql.hive.HiveGenericUDF",
          "org.apache.spark.sql.hive.HiveGenericUDTF", "org.apache.spark.sql.hive.HiveUDAFFunction");

  /** Settings analysts may change (SET, or the JDBC URL); more via spark.lakehouse.sql.settableConfs. */
  static final Set<String> SETTABLE =
      new HashSet<>(Arrays.asList("spark.sql.session.timeZone", "spark.sql.ansi.enabled"));

  /** Settings the Thrift server itself puts into each JDBC session. */
  static final Set<String> SET_BY_SPARK =
      new HashSet<>(Arrays.asList("spark.sql.hive.version", "spark.sql.datetime.java8API.enabled", RUN_SQL_ON_FILES,
          // Delta sets these on the session the first time it opens a table
          "spark.sql.parquet.fieldId.read.enabled", "spark.sql.parquet.fieldId.write.enabled",
          // HiveResult (Thrift result formatting) sets this after the first result
          "spark.sql.binaryOutputStyle"));

  static final Set<String> FILE_FORMATS =
      new HashSet<>(Arrays.asList("text", "csv", "json", "parquet", "orc", "avro", "delta", "binaryfile",
          "xml", "jdbc", "libsvm", "image", "hive", "kafka", "noop"));

  private static final Map<String, String> STATEMENT_NAMES = new HashMap<>();

  static {
    String[][] pairs = {
      {"InsertIntoStatement", "INSERT"}, {"InsertIntoDir", "INSERT OVERWRITE DIRECTORY"},
      {"UpdateTable", "UPDATE"}, {"DeltaUpdateTable", "UPDATE"}, {"DeleteFromTable", "DELETE"},
      {"DeltaDelete", "DELETE"}, {"MergeIntoTable", "MERGE"}, {"DeltaMergeInto", "MERGE"},
      {"CreateTable", "CREATE TABLE"}, {"CreateTableAsSelect", "CREATE TABLE"},
      {"CreateTableLike", "CREATE TABLE LIKE"}, {"ReplaceTable", "REPLACE TABLE"},
      {"ReplaceTableAsSelect", "REPLACE TABLE"}, {"CreateView", "CREATE VIEW"},
      {"CreateViewCommand", "CREATE VIEW"}, {"CreateNamespace", "CREATE DATABASE"},
      {"DropTable", "DROP TABLE"}, {"DropView", "DROP VIEW"}, {"DropNamespace", "DROP DATABASE"},
      {"DropFunction", "DROP FUNCTION"}, {"RestoreTableStatement", "RESTORE"},
      {"VacuumTableCommand", "VACUUM"}, {"OptimizeTableCommand", "OPTIMIZE"},
      {"CreateFunction", "CREATE FUNCTION"}, {"CreateUserDefinedFunction", "CREATE FUNCTION"},
      {"CreateFunctionCommand", "CREATE FUNCTION"}, {"AddJarsCommand", "ADD JAR"},
      {"AddFilesCommand", "ADD FILE"}, {"AddArchivesCommand", "ADD ARCHIVE"},
      {"CacheTable", "CACHE TABLE"}, {"CacheTableAsSelect", "CACHE TABLE"},
      {"UncacheTable", "UNCACHE TABLE"}, {"ClearCacheCommand", "CLEAR CACHE"},
      {"ScriptTransformation", "TRANSFORM ... USING (it runs a program)"}, {"Call", "CALL"},
      {"CompoundBody", "SQL scripting (BEGIN ... END)"}, {"LoadData", "LOAD DATA"},
      {"TruncateTable", "TRUNCATE TABLE"}, {"AnalyzeTable", "ANALYZE TABLE"},
      {"AnalyzeColumn", "ANALYZE TABLE"}, {"RefreshTable", "REFRESH TABLE"},
      {"RefreshResource", "REFRESH"}, {"CloneTableStatement", "CLONE"},
      {"ConvertToDeltaCommand", "CONVERT TO DELTA"}, {"DeltaGenerateCommand", "GENERATE"},
      {"DeltaReorgTable", "REORG TABLE"}, {"UnresolvedExecuteImmediate", "EXECUTE IMMEDIATE"},
      {"CreateVariable", "DECLARE VARIABLE"}, {"SetVariable", "SET VARIABLE"},
      {"DropVariable", "DROP VARIABLE"}, {"CreateTempViewUsing", "CREATE TEMPORARY VIEW ... USING"},
      {"ListJarsCommand", "LIST JAR"}, {"ListFilesCommand", "LIST FILE"},
      {"ListArchivesCommand", "LIST ARCHIVE"}, {"DeclareCursor", "DECLARE CURSOR"},
    };
    for (String[] p : pairs) {
      STATEMENT_NAMES.put(p[0], p[1]);
    }
  }

  static String describe(Object node) {
    String simple = node.getClass().getSimpleName().replace("$", "");
    String known = STATEMENT_NAMES.get(simple);
    if (known != null) {
      return known;
    }
    if (simple.startsWith("Alter") || simple.startsWith("SetTable") || simple.startsWith("UnsetTable")
        || simple.startsWith("SetNamespace") || simple.startsWith("RenameColumn") || simple.startsWith("Add")
        || simple.startsWith("Drop") || simple.startsWith("Rename") || simple.startsWith("Comment")) {
      return "ALTER/DDL (" + simple + ")";
    }
    return simple;
  }

  /**
   * The parser layer's verdict on {@code sqlText} for {@code user} under the resolved grants file
   * {@code grantsFile} (null: no grants): null when it passes, else the refusal. For tests of the
   * check without a server: it parses, and neither analyzes nor runs anything.
   */
  public static String parserVerdict(SparkSession session, String sqlText, String user, String grantsFile) {
    String before = org.apache.spark.sql.catalyst.CurrentUserContext.CURRENT_USER().get();
    org.apache.spark.sql.catalyst.CurrentUserContext.CURRENT_USER().set(user);
    try {
      LogicalPlan plan = session.sessionState().sqlParser().parsePlan(sqlText);
      Set<String> granted = grantsFile == null ? null : ReadGrants.forUser(grantsFile, user);
      new ParsedCheck(session, settable(session), granted).check(plan);
      return null;
    } catch (Exception e) {
      return e.getMessage();
    } finally {
      org.apache.spark.sql.catalyst.CurrentUserContext.CURRENT_USER().set(before);
    }
  }

  /** {@code throw refused(...)}: an AnalysisException (checked in Java's eyes, so thrown sneakily). */
  static RuntimeException refused(String message) {
    throw notAllowed(PREFIX + message);
  }

  /** {@code throw limited(...)}: refused for the server's limits (StatementLimit), not read-only. */
  static RuntimeException limited(String message) {
    throw notAllowed(message);
  }

  @SuppressWarnings("unchecked")
  private static RuntimeException notAllowed(String message) {
    scala.collection.immutable.Map<String, String> params =
        (scala.collection.immutable.Map<String, String>)
            scala.collection.immutable.Map$.MODULE$.<String, String>empty().updated("message", message);
    throw ReadOnlySqlExtension.<RuntimeException>sneaky(new AnalysisException("_LEGACY_ERROR_TEMP_0035", params));
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> T sneaky(Throwable t) throws T {
    throw (T) t;
  }

  /** system.builtin.f, builtin.f: Spark's own function f (no catalog can define another). */
  static boolean isBuiltin(List<String> name) {
    List<String> qualifier = new ArrayList<>();
    for (String part : name.subList(0, name.size() - 1)) {
      qualifier.add(part.toLowerCase(Locale.ROOT));
    }
    return qualifier.equals(Arrays.asList("system", "builtin")) || qualifier.equals(Arrays.asList("builtin"));
  }

  static boolean looksLikePath(String part) {
    return part.contains("/") || part.contains("\\") || part.contains(":") || part.startsWith("~");
  }

  static void checkName(List<String> parts, String shown) {
    for (String part : parts) {
      if (looksLikePath(part)) {
        throw refused("file paths cannot be queried as tables (" + shown + "); query catalog tables (SHOW TABLES)");
      }
    }
    if (parts.size() == 2 && FILE_FORMATS.contains(parts.get(0).toLowerCase(Locale.ROOT))) {
      throw refused("files cannot be queried as tables (" + shown + "); query catalog tables (SHOW TABLES)");
    }
  }

  static List<String> list(scala.collection.Seq<String> seq) {
    return new ArrayList<>(CollectionConverters.asJava(seq));
  }

  private static volatile Map<String, String> pristine;

  /**
   * The settings of a new session of this process: launch configuration plus the builder's
   * options, which Spark gives every new session (the SparkConf alone differs from them).
   */
  static Map<String, String> pristineConf(SparkSession session) {
    if (pristine == null) {
      Map<String, String> conf = new HashMap<>();
      SQLConf fresh = session.newSession().sessionState().conf();
      for (Tuple2<String, String> kv : CollectionConverters.asJava(fresh.getAllConfs().toSeq())) {
        conf.put(kv._1(), kv._2());
      }
      pristine = Collections.unmodifiableMap(conf);
    }
    return pristine;
  }

  static Set<String> settable(SparkSession session) {
    Set<String> keys = new TreeSet<>(SETTABLE);
    for (String k : session.sparkContext().getConf().get(SETTABLE_KEY, "").split(",")) {
      if (!k.isBlank()) {
        keys.add(k.strip());
      }
    }
    return keys;
  }

  // ------------------------------------------------------------------------------ the parser

  /** Delegates everything; checks statements (parsePlan*, parseQuery) in read-only sessions. */
  static final class GuardedParser implements ParserInterface {
    private final SparkSession session;
    private final ParserInterface delegate;
    private Boolean readOnly; // decided on first use (the session is fully built by then)
    private Set<String> settable;
    private Map<String, String> pristineConf; // what a new session of this process starts with

    GuardedParser(SparkSession session, ParserInterface delegate) {
      this.session = session;
      this.delegate = delegate;
    }

    private boolean readOnly() {
      if (readOnly == null) {
        readOnly = isReadOnly(session);
        settable = settable(session);
        pristineConf = pristineConf(session);
      }
      return readOnly && !TRUSTED.contains(session); // trust may be granted after the first parse
    }

    /** {@code statement}: a statement's text (parsePlan*), not a view's (parseQuery). */
    private LogicalPlan guard(LogicalPlan plan, boolean statement) {
      StatementLimit.enter(session); // every session, read-only or not
      if (readOnly()) {
        String shortTasks = pristineConf.get(LEAF_PARALLELISM);
        if (shortTasks != null) {
          session.sessionState().conf().setConfString(LEAF_PARALLELISM, shortTasks);
        }
        guardSettings();
        new ParsedCheck(session, settable, ReadGrants.forCurrentUser()).check(plan);
        if (shortTasks != null && PARSED_STATEMENTS.contains(plan.getClass().getName())
            && !(plan instanceof SetCommand) && !(plan instanceof ResetCommand)) {
          // SHOW/DESCRIBE: Delta reads a table's history with spark.range over the versions, one
          // task per leaf partition; the server's many short tasks (fair sharing among queries)
          // made DESCRIBE HISTORY of a 20-version table take 10-24 s instead of about 1 s
          session.sessionState().conf().setConfString(
              LEAF_PARALLELISM, String.valueOf(session.sparkContext().defaultParallelism()));
        }
        if (statement) {
          return ResultCaps.cap(session, plan); // an analyst's query: its result is capped
        }
      }
      return plan;
    }

    /** Session settings changed outside SET (e.g. ?key=value in a JDBC URL) are refused too. */
    private void guardSettings() {
      SQLConf conf = session.sessionState().conf();
      conf.setConfString(RUN_SQL_ON_FILES, "false"); // SELECT * FROM parquet.`/path`: never
      Set<String> changed = new TreeSet<>();
      for (Tuple2<String, String> kv : CollectionConverters.asJava(conf.getAllConfs().toSeq())) {
        String key = kv._1();
        String value = kv._2();
        // Hive applies the JVM's system properties to every HiveConf, and the Thrift server copies
        // a HiveConf's "overridden" entries into each JDBC session: server-set, not client-set.
        boolean serverSet = value.equals(pristineConf.get(key)) || value.equals(System.getProperty(key));
        // JDBC clients (beeline) set the result set's fetch size: it only paginates results
        boolean clientPaging = key.startsWith("hive.server2.thrift.resultset.");
        if (!serverSet && !clientPaging && !SET_BY_SPARK.contains(key) && !settable.contains(key)) {
          changed.add(key);
        }
      }
      if (!changed.isEmpty()) {
        throw refused("session settings were changed (by the connection URL?): " + changed
            + "; only " + String.join(", ", settable) + " may be changed");
      }
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
      return guard(delegate.parsePlan(sqlText), true);
    }

    @Override
    public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext context) throws ParseException {
      return guard(delegate.parsePlanWithParameters(sqlText, context), true);
    }

    @Override
    public LogicalPlan parseQuery(String sqlText) throws ParseException {
      return guard(delegate.parseQuery(sqlText), false);
    }

    @Override
    public Expression parseExpression(String sqlText) throws ParseException {
      return delegate.parseExpression(sqlText);
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
      return delegate.parseTableIdentifier(sqlText);
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
      return delegate.parseFunctionIdentifier(sqlText);
    }

    @Override
    public scala.collection.immutable.Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
      return delegate.parseMultipartIdentifier(sqlText);
    }

    @Override
    public StructType parseRoutineParam(String sqlText) throws ParseException {
      return delegate.parseRoutineParam(sqlText);
    }

    @Override
    public StructType parseTableSchema(String sqlText) throws ParseException {
      return delegate.parseTableSchema(sqlText);
    }

    @Override
    public DataType parseDataType(String sqlText) throws ParseException {
      return delegate.parseDataType(sqlText);
    }
  }

  /** The allow-list walk over a parsed (unresolved) plan: every node and every field. */
  static final class ParsedCheck {
    private final SparkSession session;
    private final Set<String> settable;

    /** The statement's user's read grants (null: none apply), checked by name before analysis. */
    private final Set<String> granted;
    /** Names the statement's CTEs define (lower case): a one-part name among them is no table. */
    private final Set<String> ctes = new HashSet<>();

    ParsedCheck(SparkSession session, Set<String> settable, Set<String> granted) {
      this.session = session;
      this.settable = settable;
      this.granted = granted;
    }

    /** The whole check of one parsed statement. */
    void check(LogicalPlan plan) {
      collectCtes(plan);
      statement(plan);
    }

    private void collectCtes(Object value) {
      if (value instanceof UnresolvedWith) {
        for (Tuple3<String, ?, ?> cte : CollectionConverters.asJava(((UnresolvedWith) value).cteRelations())) {
          ctes.add(cte._1().toLowerCase(Locale.ROOT));
        }
      }
      if (value instanceof LogicalPlan || value instanceof Expression) {
        Iterator<Object> it = ((Product) value).productIterator();
        while (it.hasNext()) {
          collectCtes(it.next());
        }
      } else if (value instanceof Option && ((Option<?>) value).isDefined()) {
        collectCtes(((Option<?>) value).get());
      } else if (value instanceof scala.collection.Iterable) {
        scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) value).iterator();
        while (it.hasNext()) {
          collectCtes(it.next());
        }
      } else if (value instanceof Product && value.getClass().getName().startsWith("scala.Tuple")) {
        Iterator<Object> it = ((Product) value).productIterator();
        while (it.hasNext()) {
          collectCtes(it.next());
        }
      }
    }

    /**
     * A table the statement names must be granted before Spark analyzes it: analysis errors
     * (an unresolved column's suggestions, SHOW CREATE TABLE's) would show its columns or location.
     */
    private void grantedName(List<String> parts) {
      if (granted == null || (parts.size() == 1 && ctes.contains(parts.get(0).toLowerCase(Locale.ROOT)))) {
        return;
      }
      ReadGrants.checkName(session, String.join(".", parts), granted);
    }

    /**
     * The name an IDENTIFIER(...) clause stands for, as Spark will compute it: only from
     * constants (the parser resolved it), so that computing it runs no function of the analyst's.
     */
    private List<String> identifier(Expression id) {
      Object value = id.resolved() && id.foldable() ? id.eval(null) : null;
      if (value == null) {
        throw refused("IDENTIFIER(" + id.sql() + ") is not allowed: name tables and functions with a "
            + "constant string, e.g. IDENTIFIER('gold.device_status')");
      }
      try {
        return list(session.sessionState().sqlParser().parseMultipartIdentifier(value.toString()));
      } catch (ParseException e) {
        throw refused("IDENTIFIER('" + value + "') is not a name");
      }
    }

    void statement(LogicalPlan plan) {
      String cls = plan.getClass().getName();
      if (plan instanceof ExplainCommand) {
        statement(((ExplainCommand) plan).logicalPlan()); // EXPLAIN INSERT ...: refused as INSERT
        return;
      }
      if (plan instanceof DescribeQueryCommand) {
        statement(((DescribeQueryCommand) plan).plan());
        return;
      }
      if (cls.endsWith("ParameterizedQuery") && plan.children().size() == 1) {
        // spark.sql(text, args): the statement is the child (DROP TABLE IDENTIFIER(:t), ...)
        statement(plan.children().head());
        for (Expression arg : CollectionConverters.asJava(plan.expressions())) {
          expression(arg);
        }
        return;
      }
      if (plan instanceof SetCommand) {
        checkSet((SetCommand) plan);
        return;
      }
      if (plan instanceof ResetCommand) {
        checkReset((ResetCommand) plan, settable);
        return;
      }
      if (PARSED_STATEMENTS.contains(cls)) {
        fields(plan);
        return;
      }
      if (plan instanceof PlanWithUnresolvedIdentifier) { // DROP TABLE IDENTIFIER('x'), ...: type unknown
        throw refused("statements on IDENTIFIER(...) are not allowed; " + WHAT_IS_ALLOWED);
      }
      node(plan); // a query
    }

    private void checkSet(SetCommand set) {
      Option<Tuple2<String, Option<String>>> kv = set.kv();
      if (kv.isEmpty()) {
        return; // SET, SET -v: list (Spark redacts secrets)
      }
      String key = kv.get()._1();
      if (kv.get()._2().isDefined() && !settable.contains(key)) {
        throw refused("SET " + key + " is not allowed; settable: " + String.join(", ", settable));
      }
    }

    void node(LogicalPlan plan) {
      String cls = plan.getClass().getName();
      if (!PARSED_QUERY_NODES.contains(cls)) {
        throw refused(describe(plan) + " is not allowed; " + WHAT_IS_ALLOWED);
      }
      if (plan instanceof UnresolvedRelation) {
        UnresolvedRelation r = (UnresolvedRelation) plan;
        checkName(list(r.multipartIdentifier()), String.join(".", list(r.multipartIdentifier())));
        if (!r.options().isEmpty()) {
          throw refused("read options on tables are not allowed (" + r.options().keySet() + ")");
        }
        grantedName(list(r.multipartIdentifier()));
      } else if (plan instanceof UnresolvedTable) {
        checkName(list(((UnresolvedTable) plan).multipartIdentifier()), plan.simpleString(100));
        grantedName(list(((UnresolvedTable) plan).multipartIdentifier()));
      } else if (plan instanceof UnresolvedTableOrView) {
        checkName(list(((UnresolvedTableOrView) plan).multipartIdentifier()), plan.simpleString(100));
        grantedName(list(((UnresolvedTableOrView) plan).multipartIdentifier()));
      } else if (plan instanceof UnresolvedView) {
        checkName(list(((UnresolvedView) plan).multipartIdentifier()), plan.simpleString(100));
        grantedName(list(((UnresolvedView) plan).multipartIdentifier()));
      } else if (plan instanceof UnresolvedIdentifier) {
        checkName(list(((UnresolvedIdentifier) plan).nameParts()), plan.simpleString(100));
      } else if (plan instanceof PlanWithUnresolvedIdentifier) {
        // IDENTIFIER(<constant>) in FROM: a table, or a table function (IDENTIFIER('range')(0, 9)).
        // Build what Spark will build from the name and check that, with its arguments and options.
        PlanWithUnresolvedIdentifier p = (PlanWithUnresolvedIdentifier) plan;
        List<String> name = identifier(p.identifierExpr());
        checkName(name, String.join(".", name));
        node(p.planBuilder().apply(CollectionConverters.asScala(name).toSeq(), p.children()));
        return; // the built plan holds the children
      } else if (plan instanceof UnresolvedHint) {
        UnresolvedHint hint = (UnresolvedHint) plan;
        if (PARTITION_HINTS.contains(hint.name().toLowerCase(Locale.ROOT))) {
          for (Expression parameter : CollectionConverters.asJava(hint.parameters())) {
            if (parameter instanceof Literal && !(((Literal) parameter).value() instanceof org.apache.spark.unsafe.types.UTF8String)) {
              throw refused("partition counts are the server's to choose (" + hint.name() + "(" + parameter.sql()
                  + ")): it splits statements into short tasks shared fairly; hint by columns instead, "
                  + "e.g. REPARTITION(device)");
            }
          }
        }
      } else if (plan instanceof UnresolvedTableValuedFunction) {
        UnresolvedTableValuedFunction f = (UnresolvedTableValuedFunction) plan;
        List<String> name = list(f.name());
        String fn = name.get(name.size() - 1).toLowerCase(Locale.ROOT);
        if (!TABLE_FUNCTIONS.contains(fn) || (name.size() > 1 && !isBuiltin(name))) {
          throw refused("the table function " + String.join(".", name) + " is not allowed; allowed: "
              + new TreeSet<>(TABLE_FUNCTIONS));
        }
        if (fn.equals("range") && f.functionArgs().size() > 3) {
          throw refused("partition counts are the server's to choose (range's fourth argument): it splits "
              + "statements into short tasks shared fairly; use range(start, end, step)");
        }
        for (Expression arg : CollectionConverters.asJava(f.functionArgs())) {
          if (arg instanceof Literal && ((Literal) arg).value() != null && looksLikePath(((Literal) arg).value().toString())) {
            throw refused("file paths cannot be queried (" + fn + "(" + arg.sql() + "))");
          }
        }
        if (fn.equals("table_changes")) { // its relation names no catalog table: check the name
          Expression table = f.functionArgs().isEmpty() ? null : f.functionArgs().head();
          if (!(table instanceof Literal) || ((Literal) table).value() == null) {
            throw refused("table_changes needs the table's name as a constant string here, e.g. "
                + "table_changes('gold.device_status', 0)");
          }
          List<String> tableName;
          try {
            tableName = list(session.sessionState().sqlParser().parseMultipartIdentifier(((Literal) table).value().toString()));
          } catch (ParseException e) {
            throw refused("table_changes(" + table.sql() + ", ...): not a table name");
          }
          checkName(tableName, String.join(".", tableName));
          if (granted != null) { // a CTE's name is no table here: no exception for one
            ReadGrants.checkName(session, String.join(".", tableName), granted);
          }
        }
      }
      fields(plan);
    }

    /** Every field of a node: child plans, plans held outside children (CTEs, time travel), expressions. */
    private void fields(Product node) {
      Iterator<Object> it = node.productIterator();
      while (it.hasNext()) {
        any(it.next());
      }
    }

    private void any(Object value) {
      if (value instanceof LogicalPlan) {
        node((LogicalPlan) value);
      } else if (value instanceof Expression) {
        expression((Expression) value);
      } else if (value instanceof Option) {
        Option<?> o = (Option<?>) value;
        if (o.isDefined()) {
          any(o.get());
        }
      } else if (value instanceof scala.collection.Iterable) {
        scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) value).iterator();
        while (it.hasNext()) {
          any(it.next());
        }
      } else if (value instanceof scala.Product && value.getClass().getName().startsWith("scala.Tuple")) {
        fields((Product) value);
      }
    }

    private void expression(Expression e) {
      if (e instanceof ExpressionWithUnresolvedIdentifier) {
        // IDENTIFIER('ref' || 'lect')(...): check the function call Spark will build from the name
        ExpressionWithUnresolvedIdentifier x = (ExpressionWithUnresolvedIdentifier) e;
        List<String> name = identifier(x.identifierExpr());
        expression(x.exprBuilder().apply(CollectionConverters.asScala(name).toSeq(), x.otherExprs()));
        return; // the built expression holds the other expressions
      }
      if (e instanceof UnresolvedFunction) {
        List<String> name = list(((UnresolvedFunction) e).nameParts());
        String fn = name.get(name.size() - 1).toLowerCase(Locale.ROOT);
        if (DENIED_FUNCTIONS.contains(fn)) {
          throw refused("the function " + fn + " is not allowed (it calls Java methods)");
        }
        List<Expression> args = CollectionConverters.asJava(((UnresolvedFunction) e).arguments());
        boolean takesOptions = OPTION_FUNCTIONS.contains(fn);
        for (Expression arg : args) { // map('avroSchemaUrl', ...) as an options argument
          if (takesOptions && arg instanceof ExpressionWithUnresolvedIdentifier) {
            throw refused("the arguments of " + fn + " cannot be named through IDENTIFIER(...)");
          }
          if (arg instanceof UnresolvedFunction && arg.children().size() % 2 == 0) {
            boolean isMap = list(((UnresolvedFunction) arg).nameParts()).stream()
                .reduce((a, b) -> b).map(n -> n.equalsIgnoreCase("map")).orElse(false);
            List<Expression> entries = CollectionConverters.asJava(arg.children());
            for (int i = 0; i < entries.size(); i += 2) {
              Object key = entries.get(i) instanceof Literal ? ((Literal) entries.get(i)).value() : null;
              if (key == null && takesOptions && isMap) {
                throw refused("the options of " + fn + " must be constant strings (" + entries.get(i).sql()
                    + "): the server computes them before it can check them");
              }
              if (key != null && DENIED_OPTIONS.contains(key.toString().toLowerCase(Locale.ROOT))) {
                throw refused("the option " + key + " of " + fn + " is not allowed (it makes the server "
                    + "open a file or URL)");
              }
            }
          }
        }
        if (DESCRIPTOR_FILE_FUNCTIONS.contains(fn) && args.size() > 2
            && !(args.get(2) instanceof Literal && ((Literal) args.get(2)).dataType() instanceof BinaryType)) {
          throw refused(fn + " with a descriptor file is not allowed (the server would read the file); "
              + "pass the descriptor as binary");
        }
      }
      fields(e); // children, and the plans of subqueries
    }
  }

  /** The keys of an expression's {@code options} map (from_xml, from_csv, ...), if it has one. */
  static List<String> optionKeys(Expression e) {
    List<String> keys = new ArrayList<>();
    try {
      Object options = e.getClass().getMethod("options").invoke(e);
      if (options instanceof Expression && ((Expression) options).foldable()) { // from_avro: map(...)
        Object map = ((Expression) options).eval(null);
        if (map instanceof MapData) {
          ArrayData names = ((MapData) map).keyArray();
          for (int i = 0; i < names.numElements(); i++) {
            keys.add(String.valueOf(names.getUTF8String(i)));
          }
        }
      } else if (options instanceof scala.collection.Map) {
        scala.collection.Iterator<?> it = ((scala.collection.Map<?, ?>) options).keysIterator();
        while (it.hasNext()) {
          keys.add(String.valueOf(it.next()));
        }
      }
    } catch (ReflectiveOperationException | RuntimeException ignored) {
      // no options accessor: nothing to check
    }
    return keys;
  }

  // ------------------------------------------------------------------------------ analyzed plans

  /** Runs on every analyzed plan of the session (its own and Spark/Delta internals alike). */
  static final class AnalyzedCheck extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    private final SparkSession session;
    private Boolean readOnly;

    AnalyzedCheck(SparkSession session) {
      this.session = session;
    }

    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      if (Boolean.getBoolean(DEBUG)) {
        System.err.println("[readonly] check " + (isReadOnly(session) ? "RO " : "RW ")
            + plan.getClass().getSimpleName() + ": " + plan.simpleString(60).replace('\n', ' '));
      }
      if (readOnly == null) {
        readOnly = isReadOnly(session);
      }
      if (!readOnly || TRUSTED.contains(session)) {
        return BoxedUnit.UNIT;
      }
      if (plan instanceof Command && !ANALYZED_COMMANDS.contains(plan.getClass().getName())) {
        throw refused(describe(plan) + " is not allowed; " + WHAT_IS_ALLOWED);
      }
      if (plan instanceof SetCommand) {
        Option<Tuple2<String, Option<String>>> kv = ((SetCommand) plan).kv();
        Set<String> keys = settable(session);
        if (kv.isDefined() && kv.get()._2().isDefined() && !keys.contains(kv.get()._1())) {
          throw refused("SET " + kv.get()._1() + " is not allowed; settable: " + String.join(", ", keys));
        }
      }
      if (plan instanceof ResetCommand) {
        checkReset((ResetCommand) plan, settable(session));
      }
      walk(plan, true);
      Set<String> granted = ReadGrants.forCurrentUser();
      if (granted != null) {
        if (plan instanceof ShowTablesCommand && ((ShowTablesCommand) plan).isExtended()) {
          ReadGrants.checkShowExtended(session, (ShowTablesCommand) plan, granted);
        }
        ReadGrants.check(session, plan, granted);
      }
      return BoxedUnit.UNIT;
    }

    private void walk(LogicalPlan plan, boolean root) {
      String cls = plan.getClass().getName();
      if (ANALYZED_DENIED_NODES.contains(cls) || (!root && plan instanceof Command)) {
        throw refused(describe(plan) + " is not allowed; " + WHAT_IS_ALLOWED);
      }
      for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
        walk(child, false);
      }
      // Not innerChildren: a CommandResult (df.limit(n) over an executed SHOW) holds the command
      // that already ran, and was checked, there.
      for (Expression e : CollectionConverters.asJava(plan.expressions())) {
        expression(e);
      }
    }

    private void expression(Expression e) {
      if (DENIED_EXPRESSIONS.contains(e.getClass().getName())) {
        throw refused("the function " + e.prettyName() + " is not allowed (it runs Java code)");
      }
      for (String key : optionKeys(e)) {
        if (DENIED_OPTIONS.contains(key.toLowerCase(Locale.ROOT))) {
          throw refused("the option " + key + " of " + e.prettyName() + " is not allowed (it makes the "
              + "server open a file or URL)");
        }
      }
      if (e instanceof SubqueryExpression) {
        walk(((SubqueryExpression) e).plan(), false);
      }
      for (Expression child : CollectionConverters.asJava(e.children())) {
        expression(child);
      }
    }
  }
}
