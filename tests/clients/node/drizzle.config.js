// drizzle-kit's configuration for drizzle.js: the server from its environment (a URL, which
// may leave the password out).
const { PORT, DB_USER, DB_PASSWORD, DB_NAME } = process.env;
const password = DB_PASSWORD ? `:${encodeURIComponent(DB_PASSWORD)}` : "";
module.exports = {
  dialect: "mysql",
  schema: "./drizzle-schema.js",
  dbCredentials: { url: `mysql://${encodeURIComponent(DB_USER)}${password}@127.0.0.1:${PORT}/${DB_NAME}` },
};
