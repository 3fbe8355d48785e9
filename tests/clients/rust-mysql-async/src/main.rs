//! Client-matrix runner for the Rust `mysql_async` crate: connects with the given account,
//! runs one mode, prints one JSON line (`ok`, `rows`, `error_code`, `error`) and exits 0,
//! also when the server refused (the test asserts on the JSON). See docs/clients.md.

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Error, OptsBuilder, Row, Value};

struct Args {
    host: String,
    port: u16,
    user: String,
    password: String,
    database: Option<String>,
    mode: String,
    /// TLS with the chain and name verified against this CA (PEM).
    ssl_ca: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        host: "127.0.0.1".into(),
        port: 0,
        user: String::new(),
        password: String::new(),
        database: None,
        mode: "query".into(),
        ssl_ca: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--host" => a.host = value,
            "--port" => a.port = value.parse().map_err(|e| format!("--port: {e}"))?,
            "--user" => a.user = value,
            "--password" => a.password = value,
            "--database" => a.database = (!value.is_empty()).then_some(value),
            "--mode" => a.mode = value,
            "--ssl-ca" => a.ssl_ca = Some(value),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.port == 0 {
        return Err("--port is required".into());
    }
    Ok(a)
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn cell(v: &Value) -> String {
    match v {
        Value::NULL => "null".into(),
        Value::Bytes(b) => json_str(&String::from_utf8_lossy(b)),
        Value::Int(i) => json_str(&i.to_string()),
        Value::UInt(u) => json_str(&u.to_string()),
        Value::Float(f) => json_str(&f.to_string()),
        Value::Double(d) => json_str(&d.to_string()),
        other => json_str(&other.as_sql(true)),
    }
}

fn rows_json(rows: &[Row]) -> String {
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            let cells: Vec<String> = (0..r.len())
                .map(|i| r.as_ref(i).map_or_else(|| "null".into(), cell))
                .collect();
            format!("[{}]", cells.join(","))
        })
        .collect();
    format!("[{}]", rows.join(","))
}

async fn run(a: &Args) -> Result<Vec<Row>, Error> {
    let opts = OptsBuilder::default()
        .ip_or_hostname(a.host.clone())
        .tcp_port(a.port)
        .user(Some(a.user.clone()))
        .pass(Some(a.password.clone()))
        .db_name(a.database.clone())
        .prefer_socket(false)
        .ssl_opts(a.ssl_ca.as_ref().map(|ca| {
            mysql_async::SslOpts::default()
                .with_root_certs(vec![std::path::PathBuf::from(ca).into()])
        }));
    let mut conn = Conn::new(opts).await?;
    let mut rows = Vec::new();
    match a.mode.as_str() {
        "query" => {
            rows.extend(conn.query::<Row, _>("SELECT USER()").await?);
            rows.extend(conn.query::<Row, _>("SELECT 1+1").await?);
        }
        "prepared" => {
            rows.extend(conn.exec::<Row, _, _>("SELECT ? + 1", (41,)).await?);
            rows.extend(
                conn.exec::<Row, _, _>("SELECT CONCAT(?, '!')", ("hi",))
                    .await?,
            );
        }
        _ => rows.extend(conn.query::<Row, _>("SELECT 1").await?),
    }
    conn.disconnect().await?;
    Ok(rows)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "usage: --port P --user U --password PW [--database DB] [--host H] --mode query|prepared|wrongpw: {e}"
            );
            std::process::exit(2);
        }
    };
    let line = match run(&args).await {
        Ok(rows) => format!(
            "{{\"client\":\"mysql_async\",\"mode\":{},\"ok\":true,\"rows\":{},\"error_code\":null,\"error\":null}}",
            json_str(&args.mode),
            rows_json(&rows)
        ),
        Err(e) => {
            let code = match &e {
                Error::Server(s) => s.code.to_string(),
                _ => "null".into(),
            };
            format!(
                "{{\"client\":\"mysql_async\",\"mode\":{},\"ok\":false,\"rows\":[],\"error_code\":{code},\"error\":{}}}",
                json_str(&args.mode),
                json_str(&e.to_string())
            )
        }
    };
    println!("{line}");
}
