package lakehouse.serving;

import java.io.Serializable;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.CurrentUserContext;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.analysis.UnresolvedStar;
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder;
import org.apache.spark.sql.catalyst.expressions.CaseWhen;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.MonotonicallyIncreasingID;
import org.apache.spark.sql.catalyst.expressions.RaiseError;
import org.apache.spark.sql.catalyst.expressions.ScalaUDF;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Limit$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.CalendarInterval;
import org.apache.spark.unsafe.types.VariantVal;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * Caps on what one analyst statement may return, in rows ({@code spark.lakehouse.sql.maxResultRows})
 * and in uncompressed bytes of its values ({@code spark.lakehouse.sql.maxResultBytes}), enforced in
 * the server's JVM: a statement over a cap fails with the cap, its value and how to get under it,
 * instead of gathering its result in the memory every session shares. ({@code
 * spark.driver.maxResultSize} only measures compressed task results on their way to the driver.)
 *
 * <p>The statement's own top-level query (not SHOW/DESCRIBE/SET/EXPLAIN, not a view's text, not a
 * query Spark or Delta parse while running it) is wrapped, at parse time, as
 *
 * <pre>Filter(check, GlobalLimit(maxRows + 1, LocalLimit(maxRows + 1, query)))</pre>
 *
 * The limit puts at most maxRows + 1 rows into one partition (ORDER BY stays ordered: Spark keeps a
 * sort under a limit, with TakeOrderedAndProject or a sort after the single-partition shuffle), and
 * the check, evaluated in that partition's one task, fails the statement at row maxRows + 1 or when
 * the running total of the rows' sizes passes maxBytes. A Filter adds no column: clients see the
 * query's own schema. Spark drops a limit it can prove redundant (a child with at most that many
 * rows), which would leave the rows in many partitions, each checked alone: the server excludes
 * that rule (engine.RESULT_CAP_CONF). 0 turns a cap off.
 *
 * <p>A statement is the Thrift server's (job group and current user on the parsing thread, as in
 * {@link StatementLimit}) or {@code lakehouse sql}'s (the local property {@value #STATEMENT});
 * it is capped at its first parse only.
 */
final class ResultCaps {
  static final String ROWS_KEY = "spark.lakehouse.sql.maxResultRows";
  static final String BYTES_KEY = "spark.lakehouse.sql.maxResultBytes";
  /** Set by {@code lakehouse sql} (engine.LocalEngine) on the thread that runs a statement. */
  static final String STATEMENT = "lakehouse.sql.statement";
  /** The statement this thread last capped: later parses of it are nested (views, Delta). */
  private static final String CAPPED = "lakehouse.sql.capped";
  private static final String JOB_GROUP = "spark.jobGroup.id";
  static final String BYTES_FUNCTION = "lakehouse_result_bytes";
  private static final String FIX = "aggregate, filter or add a LIMIT";

  /** Parsed roots that name things under SHOW/DESCRIBE rather than being queries. */
  private static final Set<String> NAME_NODES = Set.of("UnresolvedTable", "UnresolvedTableOrView",
      "UnresolvedView", "UnresolvedNamespace", "UnresolvedIdentifier", "UnresolvedFunctionName",
      "ResolvedNamespace", "CurrentNamespace$");

  private ResultCaps() {}

  /** {@code plan}, capped when it is the top-level query of an analyst's statement. */
  static LogicalPlan cap(SparkSession session, LogicalPlan plan) {
    SparkContext context = session.sparkContext();
    String statement = statementId(context);
    if (statement == null || statement.equals(context.getLocalProperty(CAPPED))) {
      return plan;
    }
    context.setLocalProperty(CAPPED, statement);
    SparkConf conf = context.conf();
    return wrap(plan, conf.getLong(ROWS_KEY, 0), conf.getLong(BYTES_KEY, 0));
  }

  private static String statementId(SparkContext context) {
    String group = context.getLocalProperty(JOB_GROUP);
    if (group != null && CurrentUserContext.CURRENT_USER().get() != null) {
      return group; // a Thrift statement (its id)
    }
    return context.getLocalProperty(STATEMENT);
  }

  /** Whether a parsed statement is a query (its result is rows computed by Spark). */
  static boolean isQuery(LogicalPlan plan) {
    String cls = plan.getClass().getName();
    return !(plan instanceof Command) && ReadOnlySqlExtension.PARSED_QUERY_NODES.contains(cls)
        && !NAME_NODES.contains(plan.getClass().getSimpleName());
  }

  /** {@code plan} under the caps (0: none), if it is a query; other statements unchanged. */
  static LogicalPlan wrap(LogicalPlan plan, long maxRows, long maxBytes) {
    if (maxRows <= 0 && maxBytes <= 0) {
      return plan;
    }
    if (plan.getClass().getName().endsWith("ParameterizedQuery") && plan.children().size() == 1) {
      // spark.sql(text, args): parameters are bound at the root; cap the query under it
      LogicalPlan child = wrap(plan.children().head(), maxRows, maxBytes);
      return plan.withNewChildren(CollectionConverters.asScala(List.of(child)).toSeq());
    }
    if (!isQuery(plan)) {
      return plan;
    }
    int limit = maxRows > 0 ? (int) Math.min(maxRows + 1, Integer.MAX_VALUE) : Integer.MAX_VALUE;
    LogicalPlan limited = (LogicalPlan) Limit$.MODULE$.apply(Literal.create(limit, DataTypes.IntegerType), plan);
    java.util.List<Tuple2<Expression, Expression>> branches = new java.util.ArrayList<>();
    if (maxRows > 0) { // ids count 0, 1, ... in the limit's one partition
      branches.add(new Tuple2<>(
          new GreaterThanOrEqual(new MonotonicallyIncreasingID(), Literal.create(maxRows, DataTypes.LongType)),
          new RaiseError(Literal.create(rowsMessage(maxRows), DataTypes.StringType))));
    }
    if (maxBytes > 0) {
      Expression row = new UnresolvedFunction(CollectionConverters.asScala(List.of("struct")).toSeq(),
          CollectionConverters.asScala(List.<Expression>of(new UnresolvedStar(Option.empty()))).toSeq(),
          false, Option.empty(), Option.empty(), CollectionConverters.asScala(List.<org.apache.spark.sql.catalyst.expressions.SortOrder>of()).toSeq(), false);
      Expression total = new ScalaUDF(new RunningBytes(), DataTypes.LongType,
          CollectionConverters.asScala(List.of(row)).toSeq(),
          CollectionConverters.asScala(List.<Option<ExpressionEncoder<?>>>of(Option.empty())).toSeq(),
          Option.empty(), Option.apply(BYTES_FUNCTION), false, false);
      branches.add(new Tuple2<>(new GreaterThan(total, Literal.create(maxBytes, DataTypes.LongType)),
          new RaiseError(Literal.create(bytesMessage(maxBytes), DataTypes.StringType))));
    }
    Expression check = new CaseWhen(CollectionConverters.asScala(branches).toSeq(), Option.apply(Literal.TrueLiteral()));
    return new Filter(check, limited);
  }

  static String rowsMessage(long maxRows) {
    return String.format(Locale.ROOT, "the result has more than %,d rows, the most a statement may return "
        + "on this server (LAKEHOUSE_SQL_MAX_RESULT_ROWS; 0: no cap): %s", maxRows, FIX);
  }

  static String bytesMessage(long maxBytes) {
    return String.format(Locale.ROOT, "the result is larger than %s of values (uncompressed), the most a "
        + "statement may return on this server (LAKEHOUSE_SQL_MAX_RESULT_BYTES; 0: no cap): %s; or "
        + "select fewer or narrower columns", size(maxBytes), FIX);
  }

  private static String size(long bytes) {
    if (bytes >= 1 << 20 && bytes % (1 << 20) == 0) {
      return String.format(Locale.ROOT, "%,d MiB", bytes >> 20);
    }
    return String.format(Locale.ROOT, "%,d bytes", bytes);
  }

  /**
   * Tests only: {@code sqlText} as the server would run it under the caps, in {@code session}
   * (which needs engine.RESULT_CAP_CONF, as the server's sessions have).
   */
  public static org.apache.spark.sql.Dataset<Row> query(SparkSession session, String sqlText, long maxRows, long maxBytes)
      throws org.apache.spark.sql.catalyst.parser.ParseException {
    LogicalPlan plan = wrap(session.sessionState().sqlParser().parsePlan(sqlText), maxRows, maxBytes);
    return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows((org.apache.spark.sql.classic.SparkSession) session, plan);
  }

  /**
   * The running total of the sizes of the rows its task has seen, this row included: the task's
   * own copy (each task deserializes its plan), restarted when a task attempt reuses it.
   */
  static final class RunningBytes extends AbstractFunction1<Object, Object> implements Serializable {
    private static final long serialVersionUID = 1L;
    private transient long total;
    private transient long attempt = Long.MIN_VALUE;

    @Override
    public Object apply(Object row) {
      TaskContext task = TaskContext.get();
      long current = task == null ? -1 : task.taskAttemptId();
      if (current != attempt) {
        attempt = current;
        total = 0;
      }
      total += sizeOf(row);
      return total;
    }
  }

  /**
   * The uncompressed size of a value as a client receives it: strings in UTF-8, binary as is,
   * numbers, dates and times 8 bytes (decimals 16), nested values their parts, null 1.
   */
  static long sizeOf(Object value) {
    if (value == null) {
      return 1;
    }
    if (value instanceof String) {
      return utf8Length((String) value);
    }
    if (value instanceof byte[]) {
      return ((byte[]) value).length;
    }
    if (value instanceof Row) {
      Row row = (Row) value;
      long sum = 0;
      for (int i = 0; i < row.length(); i++) {
        sum += sizeOf(row.get(i));
      }
      return sum;
    }
    if (value instanceof scala.collection.Map) {
      long sum = 0;
      scala.collection.Iterator<?> it = ((scala.collection.Map<?, ?>) value).iterator();
      while (it.hasNext()) {
        Tuple2<?, ?> kv = (Tuple2<?, ?>) it.next();
        sum += sizeOf(kv._1()) + sizeOf(kv._2());
      }
      return sum;
    }
    if (value instanceof scala.collection.Iterable) {
      long sum = 0;
      scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) value).iterator();
      while (it.hasNext()) {
        sum += sizeOf(it.next());
      }
      return sum;
    }
    if (value instanceof java.math.BigDecimal || value instanceof CalendarInterval) {
      return 16;
    }
    if (value instanceof VariantVal) {
      return ((VariantVal) value).getValue().length + ((VariantVal) value).getMetadata().length;
    }
    return 8; // numbers, booleans, dates, timestamps, intervals
  }

  private static long utf8Length(String s) {
    long n = 0;
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < 0x80) {
        n += 1;
      } else if (c < 0x800) {
        n += 2;
      } else if (Character.isHighSurrogate(c)) {
        n += 4;
        i++;
      } else {
        n += 3;
      }
    }
    return n;
  }
}
