// Drizzle against a MySQL server (tests/tests/shim_clients.rs). `node drizzle.js push` runs
// `drizzle-kit push` (which reads the schema back through information_schema and applies the
// difference) and prints `push: applied` or `push: no changes`; `node drizzle.js rows` inserts
// rows that leave columns to their defaults (`VALUES (default, ...)`) and a JSON value, and
// prints the rows read back as one JSON line; `node drizzle.js nested` prints each user with
// its posts (a relational query: one statement that aggregates the posts into JSON).
// DRIZZLE_LOG=1 prints each statement. Environment: PORT, DB_USER, DB_PASSWORD, DB_NAME.
const { execFileSync } = require("child_process");
const path = require("path");

function push() {
  let out;
  try {
    out = execFileSync(
      process.execPath,
      [path.join(__dirname, "node_modules/drizzle-kit/bin.cjs"), "push", "--config", "drizzle.config.js", "--strict=false"],
      { cwd: __dirname, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 90000 },
    );
  } catch (e) {
    // drizzle-kit may exit 1 without a word: its output, whatever there was.
    console.error(`drizzle-kit push failed (${e.status}): ${e.stdout}${e.stderr}`);
    process.exit(1);
  }
  if (out.includes("No changes detected")) {
    console.log("push: no changes");
  } else if (out.includes("Changes applied")) {
    console.log("push: applied");
  } else {
    console.error(`drizzle-kit push said: ${out}`);
    process.exit(1);
  }
}

const { asc } = require("drizzle-orm");

async function connect() {
  const mysql = require("mysql2/promise");
  const { drizzle } = require("drizzle-orm/mysql2");
  const schema = require(path.join(__dirname, "drizzle-schema.js"));
  const conn = await mysql.createConnection({
    host: "127.0.0.1",
    port: Number(process.env.PORT),
    user: process.env.DB_USER,
    password: process.env.DB_PASSWORD,
    database: process.env.DB_NAME,
  });
  // "planetscale": relational queries as correlated subqueries (the default mode's LATERAL
  // join is MySQL 8's alone).
  const db = drizzle(conn, { schema, mode: "planetscale", logger: process.env.DRIZZLE_LOG === "1" });
  return { conn, db };
}

async function rows() {
  const { conn, db } = await connect();
  const { users, posts } = db._.fullSchema;
  const before = Date.now() - 60000;
  await db.insert(users).values([{ name: "ada", email: "ada@example.com" }, { name: "bob", email: "bob@example.com", active: false }]);
  const [ada] = await db.select().from(users).where(require("drizzle-orm").eq(users.email, "ada@example.com"));
  await db.insert(posts).values({ authorId: ada.id, title: "first", meta: { tags: ["a", "b"], n: 1.5, ok: true } });
  await db.insert(posts).values({ authorId: ada.id, title: "second", price: "12.50" });
  const us = await db.select().from(users).orderBy(asc(users.id));
  const ps = await db.select().from(posts).orderBy(asc(posts.id));
  console.log(JSON.stringify({
    users: us.map((u) => [u.name, u.email, u.active, u.createdAt instanceof Date && u.createdAt.getTime() > before]),
    posts: ps.map((p) => [p.title, p.meta, p.price]),
  }));
  await conn.end();
}

async function nested() {
  const { conn, db } = await connect();
  const { users, posts } = db._.fullSchema;
  // One statement: each user with its posts, aggregated into JSON by the server
  // (JSON_ARRAYAGG of JSON_ARRAY in a correlated subquery over a derived table, which
  // MariaDB 10.11 refuses and MySQL 8 answers).
  const found = await db.query.users.findMany({
    columns: { name: true },
    with: { posts: { columns: { title: true, meta: true, price: true }, orderBy: [asc(posts.id)] } },
    orderBy: [asc(users.id)],
  });
  console.log(JSON.stringify(found));
  await conn.end();
}

const step = process.argv[2];
if (step === "push") {
  push();
} else if (step === "rows" || step === "nested") {
  (step === "rows" ? rows() : nested()).catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  console.error("usage: node drizzle.js push|rows|nested");
  process.exit(2);
}
