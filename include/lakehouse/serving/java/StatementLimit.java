package lakehouse.serving;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.SparkConf;
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
 * is parsed (views, Delta's internal queries). A statement over the limit waits up to three seconds
 * for one of the user's to end before it is refused, as the end arrives asynchronously. Should a finish event ever be lost, an entry expires
 * a minute after the statement timeout, at which the server cancels the statement anyway.
 */
final class StatementLimit {
  static final String KEY = "spark.lakehouse.sql.statementsPerUser";
  private static final String TIMEOUT_KEY = "spark.sql.thriftServer.queryTimeout";
  private static final String JOB_GROUP = "spark.jobGroup.id";
  private static final String ENDED_EVENTS_PACKAGE = "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperation";
  private static final Set<String> ENDED = Set.of("Finish", "Error", "Canceled", "Timeout", "Closed");
  private static final long GRACE_MILLIS = 3_000;

  private static final Map<String, Running> RUNNING = new HashMap<>(); // statement id -> its user
  private static SparkContext listening; // the context whose listener bus reports ends

  private record Running(String user, long startedNanos) {}

  private StatementLimit() {}

  /** Count the statement being parsed on this thread, or refuse it when its user is at the limit. */
  static void enter(SparkSession session) {
    String user = CurrentUserContext.CURRENT_USER().get();
    SparkContext context = session.sparkContext();
    String statement = context.getLocalProperty(JOB_GROUP);
    if (statement == null || user == null) {
      return; // not a Thrift statement: cheap, before any look at the (fixed) settings
    }
    SparkConf conf = context.conf();
    int limit = conf.getInt(KEY, 0);
    if (limit <= 0) {
      return;
    }
    synchronized (RUNNING) {
      listen(context);
      if (RUNNING.containsKey(statement)) {
        return; // parsed again within the same statement
      }
      long timeoutSeconds = conf.getTimeAsSeconds(TIMEOUT_KEY, "0s");
      if (timeoutSeconds > 0) {
        long oldest = System.nanoTime() - (timeoutSeconds + 60) * 1_000_000_000L;
        RUNNING.values().removeIf(r -> r.startedNanos() < oldest);
      }
      long mine = awaitBelow(user, limit);
      if (mine >= limit) {
        throw ReadOnlySqlExtension.limited(
            "too many statements at once: " + user + " already runs " + mine + " statement"
                + (mine == 1 ? "" : "s") + " on this server, the most one user may run at once "
                + "(LAKEHOUSE_SQL_STATEMENTS_PER_USER); wait for one to finish or cancel it, then send "
                + "this one again");
      }
      RUNNING.put(statement, new Running(user, System.nanoTime()));
    }
  }

  /**
   * The user's running statements, once below the limit or after {@link #GRACE_MILLIS}: the end of a
   * statement reaches this class on a listener queue, so a client that sends its next statement
   * as soon as the last one answered may arrive before that end does.
   */
  private static long awaitBelow(String user, int limit) {
    long deadline = System.nanoTime() + GRACE_MILLIS * 1_000_000L;
    while (true) {
      long mine = RUNNING.values().stream().filter(r -> r.user().equals(user)).count();
      long left = (deadline - System.nanoTime()) / 1_000_000L;
      if (mine < limit || left <= 0) {
        return mine;
      }
      try {
        RUNNING.wait(left);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return mine;
      }
    }
  }

  private static void leave(String statement) {
    synchronized (RUNNING) {
      RUNNING.remove(statement);
      RUNNING.notifyAll();
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
