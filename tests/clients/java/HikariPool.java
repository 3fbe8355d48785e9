// A HikariCP pool (Debian's libhikaricp-java, 2.7.x) on MariaDB Connector/J, for the parking
// test (tests/tests/relay_parking.rs). Compiled by tests/clients/install next to Runner.java and
// run with HikariCP.jar, slf4j-api.jar and mariadb-java-client.jar on the class path.
//
// Env: PORT, DB_USER, DB_PASSWORD. Prints the pooled session's CONNECTION_ID(), waits for a
// line on standard input, prints CONNECTION_ID() again through the pool, and exits 0.
//
// The pool keeps its connection open throughout (minimumIdle = maximumPoolSize = 1). HikariCP
// 2.7 has no keepalive thread (keepaliveTime came in 4.0); its liveness check is at checkout:
// a connection idle for more than half a second is checked with JDBC4 isValid(), which
// Connector/J sends as COM_PING. That is the ping the relay answers while the compute is
// frozen.
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;

public class HikariPool {
    static long connectionId(HikariDataSource pool) throws Exception {
        try (Connection c = pool.getConnection();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT CONNECTION_ID()")) {
            rs.next();
            return rs.getLong(1);
        }
    }

    public static void main(String[] argv) throws Exception {
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl("jdbc:mariadb://127.0.0.1:" + System.getenv("PORT")
                + "/?useSsl=false&sslMode=disable");
        config.setUsername(System.getenv("DB_USER"));
        config.setPassword(System.getenv("DB_PASSWORD"));
        config.setMaximumPoolSize(1);
        config.setMinimumIdle(1);
        try (HikariDataSource pool = new HikariDataSource(config)) {
            System.out.println(connectionId(pool));
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            System.out.println(connectionId(pool));
            System.out.flush();
        }
    }
}
