// Client-matrix runner for MariaDB Connector/J (Debian's libmariadb-java, 2.7.x), compiled by
// tests/clients/install (javac -d target/clients/java) and run as
// java -cp /usr/share/java/mariadb-java-client.jar:target/clients/java Runner ARGS
// (or without a build step: java -cp /usr/share/java/mariadb-java-client.jar Runner.java ARGS)
// (tests/tests/client_matrix.rs, docs/clients.md).
// Args: --port P --user U --password PW [--database DB] [--host H] --mode query|prepared|wrongpw
// Prints one JSON line {client, mode, ok, rows, error_code, error} and exits 0, also when the
// server refused: the test asserts on the JSON. TLS off: useSsl=false (2.x) and sslMode=disable
// (3.x); server-side prepared statements: useServerPrepStmts=true.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class Runner {
    static String json(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static void collect(ResultSet rs, List<List<String>> rows) throws SQLException {
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            for (int i = 1; i <= n; i++) row.add(rs.getString(i));
            rows.add(row);
        }
        rs.close();
    }

    /** {@code millis} stretched by $PERCEPTRON_TEST_SLOWDOWN, as the harness's deadlines are. */
    static long scaledMillis(long millis) {
        String slowdown = System.getenv("PERCEPTRON_TEST_SLOWDOWN");
        return Math.round(millis * (slowdown == null ? 1.0 : Double.parseDouble(slowdown)));
    }

    public static void main(String[] argv) {
        Map<String, String> a = new HashMap<>();
        a.put("host", "127.0.0.1");
        a.put("database", "");
        a.put("mode", "query");
        for (int i = 0; i + 1 < argv.length; i += 2) a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        if (!a.containsKey("port")) {
            System.err.println("usage error: --port is required");
            System.exit(2);
        }
        String mode = a.get("mode");
        // --ssl-ca: full verification (3.x sslMode=verify-full; 2.x useSsl with host name check).
        String tls = a.containsKey("ssl-ca")
                ? "useSsl=true&sslMode=verify-full&serverSslCert=" + a.get("ssl-ca")
                : "useSsl=false&sslMode=disable";
        String url = "jdbc:mariadb://" + a.get("host") + ":" + a.get("port") + "/" + a.get("database")
                + "?" + tls + "&useServerPrepStmts=true&connectTimeout=" + scaledMillis(60_000);
        List<List<String>> rows = new ArrayList<>();
        String out;
        try (Connection c = DriverManager.getConnection(url, a.get("user"), a.get("password"))) {
            if (mode.equals("query")) {
                try (Statement s = c.createStatement()) {
                    collect(s.executeQuery("SELECT USER()"), rows);
                    collect(s.executeQuery("SELECT 1+1"), rows);
                }
            } else if (mode.equals("prepared")) {
                try (PreparedStatement p = c.prepareStatement("SELECT ? + 1")) {
                    p.setInt(1, 41);
                    collect(p.executeQuery(), rows);
                }
                try (PreparedStatement p = c.prepareStatement("SELECT CONCAT(?, '!')")) {
                    p.setString(1, "hi");
                    collect(p.executeQuery(), rows);
                }
            } else {
                try (Statement s = c.createStatement()) {
                    collect(s.executeQuery("SELECT 1"), rows);
                }
            }
            StringBuilder r = new StringBuilder("[");
            for (int i = 0; i < rows.size(); i++) {
                if (i > 0) r.append(',');
                r.append('[');
                for (int j = 0; j < rows.get(i).size(); j++) {
                    if (j > 0) r.append(',');
                    r.append(json(rows.get(i).get(j)));
                }
                r.append(']');
            }
            r.append(']');
            out = "{\"client\":\"connector-j\",\"mode\":" + json(mode) + ",\"ok\":true,\"rows\":" + r
                    + ",\"error_code\":null,\"error\":null}";
        } catch (SQLException e) {
            // Connector/J wraps the server's ERR in its own exceptions; the vendor code is the
            // server's error number (0 when the failure was not an ERR packet).
            int code = e.getErrorCode();
            out = "{\"client\":\"connector-j\",\"mode\":" + json(mode) + ",\"ok\":false,\"rows\":[],\"error_code\":"
                    + (code == 0 ? "null" : Integer.toString(code)) + ",\"error\":" + json(e.toString()) + "}";
        }
        System.out.println(out);
        System.exit(0);
    }
}
