package lakehouse.serving;

import java.lang.reflect.Field;
import java.security.SecureRandom;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.regex.Pattern;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hive.service.Service;
import org.apache.hive.service.auth.HiveAuthFactory;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.FetchOrientation;
import org.apache.hive.service.cli.FetchType;
import org.apache.hive.service.cli.GetInfoType;
import org.apache.hive.service.cli.GetInfoValue;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.OperationHandle;
import org.apache.hive.service.cli.OperationStatus;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.cli.thrift.ThriftCLIService;
import org.apache.hive.service.rpc.thrift.TOperationHandle;
import org.apache.hive.service.rpc.thrift.TProtocolVersion;
import org.apache.hive.service.rpc.thrift.TRowSet;
import org.apache.hive.service.rpc.thrift.TStatus;
import org.apache.hive.service.rpc.thrift.TStatusCode;
import org.apache.hive.service.rpc.thrift.TTableSchema;
import org.apache.hive.service.server.HiveServer2;
import org.apache.spark.SparkThrowable;
import org.apache.spark.sql.AnalysisException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a JDBC/ODBC client of the SQL server reads when a statement fails: what and why, with
 * the SQLSTATE, never how the server is built. The Thrift server sends the whole Java stack of
 * the error (frames, class names; for analysis errors the plan with attribute ids; for task
 * failures the task and executor), in the error message of asynchronous statements and in the
 * status' info messages of synchronous ones. Installed between the Thrift service and Spark's
 * CLI service ({@link #install}), it replaces every error with its message alone, server paths
 * masked, naming an id under which the full error is in the server's log. Column metadata
 * requests (GetColumns) pass the login's read grants here, as no SQL parser sees them.
 */
public final class CleanErrors extends CLIService {
  private static final Logger LOG = LoggerFactory.getLogger("lakehouse.sql.errors");
  private static final SecureRandom IDS = new SecureRandom();
  /** One id per error, however often a client polls its statement's status. */
  private static final Map<Throwable, HiveSQLException> CLEANED = Collections.synchronizedMap(new WeakHashMap<>());

  private static final Pattern STAGE_FAILURE = Pattern.compile(
      "Job aborted due to stage failure: (Task \\S+ in stage \\S+ failed \\d+ times?, most recent failure: "
          + "Lost task \\S+ in stage \\S+ \\(TID \\d+\\) \\([^)]*\\): )?");
  private static final Pattern CLASS_NAME =
      Pattern.compile("\\b(?:[a-z][\\w$]*\\.)+[A-Z][\\w$]*(?:Exception|Error|Throwable)\\b:?\\s*");
  /** An absolute path or URL (file:/x/y, s3a://b/k, /tmp/a/b), not a/b inside an expression. */
  private static final Pattern PATH = Pattern.compile(
      "(?<![\\w.:/])(?:[a-zA-Z][\\w+.-]*:)?/{1,3}(?:[^\\s/'\"`)\\],;]+/)+[^\\s/'\"`)\\],;]*");

  private final CLIService delegate;

  private CleanErrors(CLIService delegate) {
    super(null);
    this.delegate = delegate;
  }

  /** Put the cleaner in front of {@code server}'s CLI service (before clients connect). */
  public static void install(HiveServer2 server) throws ReflectiveOperationException {
    for (Service service : server.getServices()) {
      if (service instanceof ThriftCLIService) {
        Field field = ThriftCLIService.class.getDeclaredField("cliService");
        field.setAccessible(true);
        CLIService current = (CLIService) field.get(service);
        if (!(current instanceof CleanErrors)) {
          field.set(service, new CleanErrors(current));
        }
        return;
      }
    }
    throw new IllegalStateException("the SQL server has no Thrift service to clean the errors of");
  }

  /** A failed statement's error as a client sees it: the message, without a trace or a class. */
  static final class Clean extends HiveSQLException {
    Clean(String message, String sqlState, int code) {
      super(message, sqlState, code);
    }

    @Override
    public synchronized Throwable fillInStackTrace() {
      return this; // no frames: the trace is the server log's
    }

    @Override
    public String toString() {
      return getMessage(); // printStackTrace (GetOperationStatus's error message) starts with this
    }

    @Override
    public TStatus toTStatus() { // no info messages: Hive puts the stack there
      TStatus status = new TStatus(TStatusCode.ERROR_STATUS);
      status.setSqlState(getSQLState());
      status.setErrorCode(getErrorCode());
      status.setErrorMessage(getMessage());
      return status;
    }
  }

  static HiveSQLException clean(Throwable error) {
    if (error instanceof Clean) {
      return (Clean) error;
    }
    return CLEANED.computeIfAbsent(error, e -> {
      String id = HexFormat.of().formatHex(IDS.generateSeed(4));
      LOG.warn("statement error " + id + " (the client was told: " + message(e) + ")", e);
      return new Clean(message(e) + " [error " + id + " in the server's log]", sqlState(e),
          e instanceof HiveSQLException ? ((HiveSQLException) e).getErrorCode() : 0);
    });
  }

  /** The message of the error that says why: the deepest Spark error with a condition, else the top one. */
  static String message(Throwable error) {
    Throwable chosen = null;
    int depth = 0;
    for (Throwable t = error; t != null && depth < 20; t = t.getCause(), depth++) {
      if (t instanceof SparkThrowable && ((SparkThrowable) t).getCondition() != null) {
        chosen = t;
      }
    }
    String text;
    if (chosen instanceof AnalysisException) {
      text = ((AnalysisException) chosen).getSimpleMessage(); // without the analyzed plan
    } else if (chosen != null) {
      text = chosen.getMessage();
    } else {
      text = error.getMessage() == null ? error.getClass().getSimpleName() : error.getMessage();
    }
    return tidy(text);
  }

  public static String tidy(String text) {
    String out = text.strip().replaceFirst("^Error running query: ", "");
    out = STAGE_FAILURE.matcher(out).replaceAll("");
    out = CLASS_NAME.matcher(out).replaceAll("");
    out = out.replaceFirst("^(\\[[A-Z_.]+\\] )\\1", "$1"); // "[X] <class>: [X] ...": the condition once
    StringBuilder kept = new StringBuilder();
    for (String line : out.split("\n")) {
      String trimmed = line.strip();
      if (trimmed.startsWith("at ") || trimmed.startsWith("Driver stacktrace") || trimmed.startsWith("Caused by")) {
        break;
      }
      kept.append(kept.length() == 0 ? "" : "\n").append(line);
      if (line.contains("SQLSTATE:")) {
        break; // the SQL fragment, plan or frames follow
      }
    }
    String message = kept.toString().strip();
    if (message.endsWith(";")) {
      message = message.substring(0, message.length() - 1);
    }
    return PATH.matcher(message).replaceAll("<path>");
  }

  private static String sqlState(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof SparkThrowable && ((SparkThrowable) t).getSqlState() != null) {
        return ((SparkThrowable) t).getSqlState();
      }
      if (t instanceof java.sql.SQLException && ((java.sql.SQLException) t).getSQLState() != null) {
        return ((java.sql.SQLException) t).getSQLState();
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return null;
  }

  private interface Call<T> {
    T run() throws HiveSQLException;
  }

  private static <T> T cleaned(Call<T> call) throws HiveSQLException {
    try {
      return call.run();
    } catch (HiveSQLException | RuntimeException e) {
      throw clean(e);
    }
  }

  // ------------------------------------------------------------------------------ delegation

  @Override
  public HiveConf getHiveConf() {
    return delegate.getHiveConf();
  }

  @Override
  public org.apache.hadoop.security.UserGroupInformation getServiceUGI() {
    return delegate.getServiceUGI();
  }

  @Override
  public org.apache.hadoop.security.UserGroupInformation getHttpUGI() {
    return delegate.getHttpUGI();
  }

  @Override
  public SessionManager getSessionManager() {
    return delegate.getSessionManager();
  }

  @Override
  public synchronized void init(HiveConf conf) {} // the delegate is the running service

  @Override
  public synchronized void start() {}

  @Override
  public synchronized void stop() {}

  @Override
  public SessionHandle openSession(TProtocolVersion v, String user, String password, Map<String, String> conf)
      throws HiveSQLException {
    return cleaned(() -> delegate.openSession(v, user, password, conf));
  }

  @Override
  public SessionHandle openSessionWithImpersonation(TProtocolVersion v, String user, String password,
      Map<String, String> conf, String token) throws HiveSQLException {
    return cleaned(() -> delegate.openSessionWithImpersonation(v, user, password, conf, token));
  }

  @Override
  public SessionHandle openSession(TProtocolVersion v, String user, String password, String ip,
      Map<String, String> conf) throws HiveSQLException {
    return cleaned(() -> delegate.openSession(v, user, password, ip, conf));
  }

  @Override
  public SessionHandle openSessionWithImpersonation(TProtocolVersion v, String user, String password, String ip,
      Map<String, String> conf, String token) throws HiveSQLException {
    return cleaned(() -> delegate.openSessionWithImpersonation(v, user, password, ip, conf, token));
  }

  @Override
  public SessionHandle openSession(String user, String password, Map<String, String> conf) throws HiveSQLException {
    return cleaned(() -> delegate.openSession(user, password, conf));
  }

  @Override
  public SessionHandle openSessionWithImpersonation(String user, String password, Map<String, String> conf,
      String token) throws HiveSQLException {
    return cleaned(() -> delegate.openSessionWithImpersonation(user, password, conf, token));
  }

  @Override
  public void closeSession(SessionHandle session) throws HiveSQLException {
    cleaned(() -> {
      delegate.closeSession(session);
      return null;
    });
  }

  @Override
  public GetInfoValue getInfo(SessionHandle session, GetInfoType type) throws HiveSQLException {
    return cleaned(() -> delegate.getInfo(session, type));
  }

  @Override
  public OperationHandle executeStatement(SessionHandle session, String statement, Map<String, String> conf)
      throws HiveSQLException {
    return cleaned(() -> delegate.executeStatement(session, statement, conf));
  }

  @Override
  public OperationHandle executeStatement(SessionHandle session, String statement, Map<String, String> conf,
      long timeout) throws HiveSQLException {
    return cleaned(() -> delegate.executeStatement(session, statement, conf, timeout));
  }

  @Override
  public OperationHandle executeStatementAsync(SessionHandle session, String statement, Map<String, String> conf)
      throws HiveSQLException {
    return cleaned(() -> delegate.executeStatementAsync(session, statement, conf));
  }

  @Override
  public OperationHandle executeStatementAsync(SessionHandle session, String statement, Map<String, String> conf,
      long timeout) throws HiveSQLException {
    return cleaned(() -> delegate.executeStatementAsync(session, statement, conf, timeout));
  }

  @Override
  public OperationHandle getTypeInfo(SessionHandle session) throws HiveSQLException {
    return cleaned(() -> delegate.getTypeInfo(session));
  }

  @Override
  public OperationHandle getCatalogs(SessionHandle session) throws HiveSQLException {
    return cleaned(() -> delegate.getCatalogs(session));
  }

  @Override
  public OperationHandle getSchemas(SessionHandle session, String catalog, String schema) throws HiveSQLException {
    return cleaned(() -> delegate.getSchemas(session, catalog, schema));
  }

  @Override
  public OperationHandle getTables(SessionHandle session, String catalog, String schema, String table,
      List<String> types) throws HiveSQLException {
    return cleaned(() -> delegate.getTables(session, catalog, schema, table, types));
  }

  @Override
  public OperationHandle getTableTypes(SessionHandle session) throws HiveSQLException {
    return cleaned(() -> delegate.getTableTypes(session));
  }

  @Override
  public OperationHandle getColumns(SessionHandle session, String catalog, String schema, String table,
      String column) throws HiveSQLException {
    return cleaned(() -> {
      try { // the columns of tables the login may not read are theirs to hide (no parser sees this)
        ReadGrants.checkColumnsRequest(delegate.getSessionManager().getSession(session).getUserName(), schema, table);
      } catch (RuntimeException refused) {
        throw new HiveSQLException(refused.getMessage(), "42000", refused);
      }
      return delegate.getColumns(session, catalog, schema, table, column);
    });
  }

  @Override
  public OperationHandle getFunctions(SessionHandle session, String catalog, String schema, String function)
      throws HiveSQLException {
    return cleaned(() -> delegate.getFunctions(session, catalog, schema, function));
  }

  @Override
  public OperationHandle getPrimaryKeys(SessionHandle session, String catalog, String schema, String table)
      throws HiveSQLException {
    return cleaned(() -> delegate.getPrimaryKeys(session, catalog, schema, table));
  }

  @Override
  public OperationHandle getCrossReference(SessionHandle session, String primaryCatalog, String primarySchema,
      String primaryTable, String foreignCatalog, String foreignSchema, String foreignTable)
      throws HiveSQLException {
    return cleaned(() -> delegate.getCrossReference(session, primaryCatalog, primarySchema, primaryTable,
        foreignCatalog, foreignSchema, foreignTable));
  }

  @Override
  public OperationStatus getOperationStatus(OperationHandle operation) throws HiveSQLException {
    OperationStatus status = cleaned(() -> delegate.getOperationStatus(operation));
    HiveSQLException error = status.getOperationException();
    return error == null ? status : new OperationStatus(status.getState(), clean(error));
  }

  @Override
  public HiveConf getSessionConf(SessionHandle session) throws HiveSQLException {
    return cleaned(() -> delegate.getSessionConf(session));
  }

  @Override
  public void cancelOperation(OperationHandle operation) throws HiveSQLException {
    cleaned(() -> {
      delegate.cancelOperation(operation);
      return null;
    });
  }

  @Override
  public void closeOperation(OperationHandle operation) throws HiveSQLException {
    cleaned(() -> {
      delegate.closeOperation(operation);
      return null;
    });
  }

  @Override
  public TTableSchema getResultSetMetadata(OperationHandle operation) throws HiveSQLException {
    return cleaned(() -> delegate.getResultSetMetadata(operation));
  }

  @Override
  public TRowSet fetchResults(OperationHandle operation) throws HiveSQLException {
    return cleaned(() -> delegate.fetchResults(operation));
  }

  @Override
  public TRowSet fetchResults(OperationHandle operation, FetchOrientation orientation, long maxRows,
      FetchType fetchType) throws HiveSQLException {
    return cleaned(() -> delegate.fetchResults(operation, orientation, maxRows, fetchType));
  }

  @Override
  public synchronized String getDelegationTokenFromMetaStore(String owner) throws HiveSQLException,
      UnsupportedOperationException, javax.security.auth.login.LoginException, java.io.IOException {
    return delegate.getDelegationTokenFromMetaStore(owner);
  }

  @Override
  public String getDelegationToken(SessionHandle session, HiveAuthFactory factory, String owner, String renewer)
      throws HiveSQLException {
    return cleaned(() -> delegate.getDelegationToken(session, factory, owner, renewer));
  }

  @Override
  public void cancelDelegationToken(SessionHandle session, HiveAuthFactory factory, String token)
      throws HiveSQLException {
    cleaned(() -> {
      delegate.cancelDelegationToken(session, factory, token);
      return null;
    });
  }

  @Override
  public void renewDelegationToken(SessionHandle session, HiveAuthFactory factory, String token)
      throws HiveSQLException {
    cleaned(() -> {
      delegate.renewDelegationToken(session, factory, token);
      return null;
    });
  }

  @Override
  public String getQueryId(TOperationHandle operation) throws HiveSQLException {
    return cleaned(() -> delegate.getQueryId(operation));
  }
}
