// The schema of drizzle.js (tests/tests/shim_clients.rs): defaults of each kind drizzle-kit
// reads back (a boolean, a decimal, `(now())`), a unique key, a foreign key, a JSON column;
// and the relations between its tables.
const { mysqlTable, int, varchar, json, timestamp, boolean, decimal } = require("drizzle-orm/mysql-core");
const { relations } = require("drizzle-orm");

const users = mysqlTable("users", {
  id: int("id").autoincrement().primaryKey(),
  name: varchar("name", { length: 64 }).notNull(),
  email: varchar("email", { length: 128 }).notNull().unique(),
  active: boolean("active").notNull().default(true),
  createdAt: timestamp("created_at", { fsp: 3 }).notNull().defaultNow(),
});

const posts = mysqlTable("posts", {
  id: int("id").autoincrement().primaryKey(),
  authorId: int("author_id").notNull().references(() => users.id),
  title: varchar("title", { length: 200 }).notNull(),
  meta: json("meta"),
  price: decimal("price", { precision: 10, scale: 2 }).default("0.00"),
});

// For relational queries (`db.query.users.findMany({ with: { posts: true } })`), which Drizzle
// answers with one statement that aggregates each user's posts into JSON (JSON_ARRAYAGG).
const usersRelations = relations(users, ({ many }) => ({ posts: many(posts) }));
const postsRelations = relations(posts, ({ one }) => ({
  author: one(users, { fields: [posts.authorId], references: [users.id] }),
}));

module.exports = { users, posts, usersRelations, postsRelations };
