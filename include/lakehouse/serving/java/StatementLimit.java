package lakehouse.serving;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.CurrentUserContext;

/**
 * At most {@code spark.lakehouse.sql.statementsPerUser} statements of one user run at once on the
 * SQL server: a user who sends a burst of heavy statements (a dashboard's dozen tiles, a script
 * in a loop) cannot queue every other analyst behind them. The next one is refused at once with
 * the reason, rather than queued, so the client knows.
 *
 * <p>A statement is counted from its parse until the Thrift server reports it finished, failed,
 * cancelled, timed out or closed (its listener events, on a listener queue of their own). The
 * Thrift server sets the statement id as the job group and the session's user as Spark's current
 * user on the thread that parses it; statements without both (the server's own catalog sync,
 * {@code lakehouse sql} in-process) are not counted. A statement is counted once however often it
 * is parsed (views, Delta's internal queries). Should a finish event ever be lost, an entry expires
 * a minute after the statement timeout, at which the server cancels the statement anyway.
 */
final class StatementLimit {
  static final String KEY = "spark.lakehouse.sql.statementsPerUser";
  private static final String TIMEOUT_KEY = "spark.sql.thriftServer.queryTimeout";
  private static final String JOB_GROUP = "spark.jobGroup.id";
  private static final String ENDED_EVENTS_PACKAGE = "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperation";
  private static final Set<String> ENDED = Set.of("Finish", "Error", "Canceled", "Timeout", "Closed");

  private static final Map<String, Set<String>> RUNNING = new HashMap<>(); // user -> statement ids
  private static final Map<String, Running> BY_ID = new HashMap<>();
  private static SparkContext listening; // the context whose listener bus reports ends

  private record Running(String user, long startedNanos) {}

  private StatementLimit() {}

  /** Count the statement being parsed on this thread, or refuse it when its user is at the limit. */
  static void enter(SparkSession session) {
    SparkContext context = session.sparkContext();
    int limit = context.getConf().getInt(KEY, 0);
    String statement = context.getLocalProperty(JOB_GROUP);
    String user = CurrentUserContext.CURRENT_USER().get();
    if (limit <= 0 || statement == null || user == null) {
      return;
    }
    synchronized (RUNNING) {
      listen(context);
      if (BY_ID.containsKey(statement)) {
        return; // parsed again within the same statement
      }
      Set<String> mine = RUNNING.computeIfAbsent(user, u -> new HashSet<>());
      expire(mine, context);
      if (mine.size() >= limit) {
        throw ReadOnlySqlExtension.limited(
            "too many statements at once: " + user + " already runs " + mine.size() + " statement"
                + (mine.size() == 1 ? "" : "s") + " on this server, the most one user may run at once "
                + "(LAKEHOUSE_SQL_STATEMENTS_PER_USER); wait for one to finish or cancel it, then send "
                + "this one again");
      }
      mine.add(statement);
      BY_ID.put(statement, new Running(user, System.nanoTime()));
    }
  }

  /** How many statements of {@code user} are counted now (tests and diagnostics). */
  static int running(String user) {
    synchronized (RUNNING) {
      Set<String> mine = RUNNING.get(user);
      return mine == null ? 0 : mine.size();
    }
  }

  private static void leave(String statement) {
    synchronized (RUNNING) {
      Running running = BY_ID.remove(statement);
      if (running != null) {
        Set<String> mine = RUNNING.get(running.user());
        mine.remove(statement);
        if (mine.isEmpty()) {
          RUNNING.remove(running.user());
        }
      }
    }
  }

  private static void expire(Set<String> mine, SparkContext context) {
    long timeoutSeconds = context.getConf().getTimeAsSeconds(TIMEOUT_KEY, "0s");
    if (timeoutSeconds <= 0) {
      return;
    }
    long oldest = System.nanoTime() - (timeoutSeconds + 60) * 1_000_000_000L;
    for (Iterator<String> it = mine.iterator(); it.hasNext(); ) {
      String statement = it.next();
      if (BY_ID.get(statement).startedNanos() < oldest) {
        it.remove();
        BY_ID.remove(statement);
      }
    }
  }

  private static void listen(SparkContext context) {
    if (listening == context) {
      return;
    }
    listening = context;
    // a queue of its own: the shared queue drops events when analysts' tasks flood it
    context.listenerBus().addToQueue(new Ends(), "lakehouseStatements");
  }

  /** Releases a statement when the Thrift server reports that it ended. */
  private static final class Ends extends SparkListener {
    @Override
    public void onOtherEvent(SparkListenerEvent event) {
      String name = event.getClass().getName();
      if (!name.startsWith(ENDED_EVENTS_PACKAGE) || !ENDED.contains(name.substring(ENDED_EVENTS_PACKAGE.length()))) {
        return;
      }
      try {
        leave((String) event.getClass().getMethod("id").invoke(event));
      } catch (ReflectiveOperationException e) {
        throw new IllegalStateException("cannot read the statement id of " + name, e);
      }
    }
  }
}
