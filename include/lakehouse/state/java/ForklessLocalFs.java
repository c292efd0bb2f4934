package lakehouse.state;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system ({@code file:}) behind the {@code FileContext} API (Spark's
 * checkpoints and state stores, Delta's log store on local paths; {@code
 * fs.AbstractFileSystem.file.impl}) without a process per file operation.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} runs
 * {@code chmod} for every file it creates and {@code readlink} for both sides of every rename:
 * a Spark checkpoint file or a Delta commit cost four to six processes, about 35 per second in
 * a test session and a few per micro-batch in every driver. Here permissions are set and links
 * told apart through java.nio, in the JVM; anything else (a sticky bit, a symbolic link, a file
 * system without POSIX attributes) goes Hadoop's own way. Renames, creates and listings are
 * Hadoop's, unchanged: Delta's and Spark's guarantees rest on them. Checksummed, as Hadoop's
 * {@code LocalFs}.
 */
public class ForklessLocalFs extends ChecksumFs {

  public ForklessLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new RawFs(uri, conf));
  }

  /** The raw (unchecksummed) local file system, with its two forks done in the JVM. */
  public static class Raw extends RawLocalFileSystem {

    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {
        super.setPermission(path, permission);
        return;
      }
      java.nio.file.Path file = pathToFile(path).toPath();
      try {
        Files.setPosixFilePermissions(
            file, PosixFilePermissions.fromString(permission.toString().substring(0, 9)));
      } catch (NoSuchFileException e) {
        throw new FileNotFoundException("cannot set the permissions of " + path + ": it does not exist");
      } catch (UnsupportedOperationException e) {
        super.setPermission(path, permission);
      }
    }

    @Override
    public FileStatus getFileLinkStatus(Path path) throws IOException {
      if (Files.isSymbolicLink(pathToFile(path).toPath())) {
        return super.getFileLinkStatus(path);
      }
      return getFileStatus(path); // what Hadoop returns for a file or a directory (or throws if absent)
    }
  }

  /** {@link Raw} behind the {@code FileContext} API, as Hadoop's {@code RawLocalFs}. */
  public static class RawFs extends DelegateToFileSystem {

    public RawFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(FsConstants.LOCAL_FS_URI, new Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    public FsServerDefaults getServerDefaults(Path path) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // as Hadoop's: the operating system decides
    }
  }
}
