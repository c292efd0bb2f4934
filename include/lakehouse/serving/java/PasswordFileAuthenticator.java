package lakehouse.serving;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Base64;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;
import org.apache.hadoop.conf.Configurable;
import org.apache.hadoop.conf.Configuration;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * Password authentication for the Spark Thrift Server (HiveServer2 "CUSTOM" mode) against a file
 * of salted PBKDF2-SHA256 hashes, one {@code user:pbkdf2_sha256$iterations$salt$hash} per line,
 * written by {@code lakehouse users add}. The file is read at every login, so adding or removing
 * a user needs no restart. Its path is the server setting (or JVM system property) {@value #FILE_KEY}.
 */
public final class PasswordFileAuthenticator implements PasswdAuthenticationProvider, Configurable {
  public static final String FILE_KEY = "lakehouse.serve.password.file";
  private static final String SCHEME = "pbkdf2_sha256";

  private Configuration conf;

  @Override
  public void setConf(Configuration conf) {
    this.conf = conf;
  }

  @Override
  public Configuration getConf() {
    return conf;
  }

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String file = conf == null ? null : conf.get(FILE_KEY, System.getProperty(FILE_KEY));
    if (file == null || file.isEmpty()) {
      throw new AuthenticationException("password authentication is on but " + FILE_KEY + " is not set");
    }
    String entry = null;
    try {
      for (String line : Files.readAllLines(Path.of(file), StandardCharsets.UTF_8)) {
        String trimmed = line.strip();
        int colon = trimmed.indexOf(':');
        if (!trimmed.startsWith("#") && colon > 0 && trimmed.substring(0, colon).equals(user)) {
          entry = trimmed.substring(colon + 1);
        }
      }
    } catch (IOException e) {
      throw new AuthenticationException("cannot read the password file " + file, e);
    }
    if (entry == null || password == null || !matches(password, entry)) {
      throw new AuthenticationException("wrong user name or password");
    }
  }

  static boolean matches(String password, String entry) throws AuthenticationException {
    String[] parts = entry.split("\\$");
    if (parts.length != 4 || !parts[0].equals(SCHEME)) {
      throw new AuthenticationException("unsupported password hash (expected " + SCHEME + ")");
    }
    try {
      byte[] salt = Base64.getDecoder().decode(parts[2]);
      byte[] expected = Base64.getDecoder().decode(parts[3]);
      PBEKeySpec spec =
          new PBEKeySpec(password.toCharArray(), salt, Integer.parseInt(parts[1]), expected.length * 8);
      byte[] actual = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
      return MessageDigest.isEqual(actual, expected);
    } catch (GeneralSecurityException | IllegalArgumentException e) {
      throw new AuthenticationException("malformed password hash", e);
    }
  }
}
