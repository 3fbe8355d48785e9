// Client-matrix runner for Node `mysql2` (tests/tests/client_matrix.rs, docs/clients.md).
// Usage: node runner.js --port P --user U --password PW [--database DB] [--host H]
//        --mode query|prepared|wrongpw
// Prints one JSON line {client, mode, ok, rows, error_code, error} and exits 0, also when the
// server refused: the test asserts on the JSON. Without --ssl-ca no `ssl` option: mysql2 then
// never asks for TLS; with it, TLS with the chain and name verified against that CA.
'use strict';
const mysql = require('mysql2/promise');

function parseArgs(argv) {
  const a = { host: '127.0.0.1', database: '', mode: 'query' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (argv[i + 1] === undefined) throw new Error(`${argv[i]} needs a value`);
    a[key] = argv[i + 1];
  }
  if (!a.port) throw new Error('--port is required');
  return a;
}

const cell = (v) => (v === null || v === undefined ? null : String(v));

async function run(a) {
  const conn = await mysql.createConnection({
    host: a.host,
    port: Number(a.port),
    user: a.user,
    password: a.password,
    database: a.database || undefined,
    // Stretched by $PERCEPTRON_TEST_SLOWDOWN, as the harness's deadlines are.
    connectTimeout: Math.round(60000 * Number(process.env.PERCEPTRON_TEST_SLOWDOWN || 1)),
    ssl: a['ssl-ca'] ? { ca: require('fs').readFileSync(a['ssl-ca']) } : undefined,
  });
  const rows = [];
  const add = (rs) => rs.forEach((r) => rows.push(r.map(cell)));
  try {
    if (a.mode === 'query') {
      add((await conn.query({ sql: 'SELECT USER()', rowsAsArray: true }))[0]);
      add((await conn.query({ sql: 'SELECT 1+1', rowsAsArray: true }))[0]);
    } else if (a.mode === 'prepared') {
      // execute() is COM_STMT_PREPARE + COM_STMT_EXECUTE with bound parameters.
      add((await conn.execute({ sql: 'SELECT ? + 1', rowsAsArray: true }, [41]))[0]);
      add((await conn.execute({ sql: "SELECT CONCAT(?, '!')", rowsAsArray: true }, ['hi']))[0]);
    } else {
      add((await conn.query({ sql: 'SELECT 1', rowsAsArray: true }))[0]);
    }
  } finally {
    await conn.end();
  }
  return rows;
}

(async () => {
  let a;
  try {
    a = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`usage error: ${e.message}\n`);
    process.exit(2);
  }
  const out = { client: 'mysql2', mode: a.mode, ok: false, rows: [], error_code: null, error: null };
  try {
    out.rows = await run(a);
    out.ok = true;
  } catch (e) {
    out.error_code = typeof e.errno === 'number' ? e.errno : null;
    out.error = String(e.message || e);
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
})();
