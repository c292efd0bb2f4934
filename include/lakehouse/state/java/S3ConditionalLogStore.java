package lakehouse.state;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

import io.delta.storage.S3SingleDriverLogStore;

/**
 * Delta's log store for {@code s3a://} tables written by more than one JVM: a commit is S3A's
 * conditional create ({@code If-None-Match: *}), so the object store itself refuses a second
 * commit of the same version, from whichever process or host it comes.
 *
 * <p>Delta's default for S3, {@link S3SingleDriverLogStore}, makes a commit exclusive with a lock
 * inside its JVM and an existence check before the upload: two drivers (a flow's driver frozen past
 * its lease and the driver that took the flow over, or a stream and a backfill on different hosts)
 * can both find version N free and both upload it, and the second upload silently replaces the
 * first commit. Here the loser gets {@link FileAlreadyExistsException}, which Delta's optimistic
 * concurrency turns into a retry at the next version after checking for conflicts (or a
 * {@code ConcurrentTransactionException} for a streaming batch the other driver already wrote).
 *
 * <p>The listing (S3's sorted, optionally fast {@code startAfter} listing) and reads are the
 * default store's. Overwrites (Delta's checksum and checkpoint files, which are idempotent) stay
 * plain uploads. An S3 upload becomes visible whole or not at all, so no partial commit is ever
 * seen. Needs a store that honours {@code If-None-Match} on PUT (S3 since 2024, MinIO, S3Proxy,
 * SeaweedFS) and S3A with {@code fs.s3a.create.conditional.enabled} (its default).
 */
public class S3ConditionalLogStore extends S3SingleDriverLogStore {
  static final String CONDITIONAL_OVERWRITE = "fs.option.create.conditional.overwrite";

  public S3ConditionalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    FSDataOutputStream out =
        overwrite
            ? fs.create(path, true)
            : (FSDataOutputStream)
                fs.createFile(path).overwrite(false).must(CONDITIONAL_OVERWRITE, true).build();
    try {
      while (actions.hasNext()) {
        out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
      out.close(); // the upload: a conditional create fails here when the version exists
    } catch (IOException e) {
      if (!overwrite && isPreconditionFailure(e)) {
        FileAlreadyExistsException exists = new FileAlreadyExistsException(path.toString());
        exists.initCause(e);
        throw exists;
      }
      throw e;
    } finally {
      closeQuietly(out);
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }

  /** HTTP 412, as S3A reports a refused {@code If-None-Match} (its exception types vary by version). */
  static boolean isPreconditionFailure(Throwable error) {
    for (Throwable e = error; e != null; e = e.getCause()) {
      if (e instanceof FileAlreadyExistsException) {
        return true;
      }
      String message = String.valueOf(e.getMessage());
      if (message.contains("PreconditionFailed")
          || message.contains("Precondition Failed")
          || message.contains("Status Code: 412")
          || message.contains("status code: 412")
          || message.contains("(412)")) {
        return true;
      }
      if (e instanceof InterruptedIOException) {
        return false;
      }
    }
    return false;
  }

  private static void closeQuietly(FSDataOutputStream out) {
    try {
      out.close(); // a second close of S3A's stream is a no-op
    } catch (IOException ignored) {
      // the first close's error, if any, is the one thrown
    }
  }
}
