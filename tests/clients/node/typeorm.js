// TypeORM against a MySQL server (tests/tests/shim_clients.rs): synchronize on a first start,
// then on a second one, where the schema must already match the entities (TypeORM reads it
// back through information_schema: types, ENUM values, defaults, ON UPDATE, foreign keys);
// rows saved with defaults (`VALUES (DEFAULT, ...)`), relations, a rolled-back transaction.
// Prints one line per step. Environment: PORT, DB_USER, DB_PASSWORD, DB_NAME.
require("reflect-metadata");
const { DataSource, EntitySchema } = require("typeorm");

const Customer = new EntitySchema({
  name: "Customer",
  tableName: "customer",
  columns: {
    id: { type: Number, primary: true, generated: true },
    email: { type: String, length: 100, unique: true },
    vip: { type: Boolean, default: false },
    tier: { type: "enum", enum: ["free", "pro"], default: "free" },
    created: { type: "datetime", precision: 6, createDate: true },
    updated: { type: "datetime", precision: 6, updateDate: true },
    note: { type: "varchar", length: 40, nullable: true },
  },
  relations: { orders: { type: "one-to-many", target: "Order", inverseSide: "customer" } },
});
const Order = new EntitySchema({
  name: "Order",
  tableName: "order",
  columns: {
    id: { type: Number, primary: true, generated: true },
    qty: { type: Number, default: 1 },
    total: { type: "decimal", precision: 10, scale: 2, default: 0 },
  },
  relations: {
    customer: { type: "many-to-one", target: "Customer", joinColumn: true, onDelete: "CASCADE" },
  },
});

async function run(step) {
  const ds = new DataSource({
    type: "mysql",
    host: "127.0.0.1",
    port: Number(process.env.PORT),
    username: process.env.DB_USER,
    password: process.env.DB_PASSWORD,
    database: process.env.DB_NAME,
    entities: [Customer, Order],
    synchronize: step === "first",
    logging: process.env.ORM_LOG ? ["query", "error"] : false,
  });
  await ds.initialize();
  if (step === "first") {
    console.log(`${step}: synchronized`);
  } else {
    const pending = await ds.driver.createSchemaBuilder().log();
    console.log(`${step}: ${pending.upQueries.length} schema changes pending`);
    await ds.synchronize();
  }
  const customers = ds.getRepository("Customer");
  const orders = ds.getRepository("Order");
  if (step === "first") {
    const c = await customers.save({ email: "a@example.com" });
    await orders.save({ customer: c, qty: 3, total: "12.50" });
    await orders.save({ customer: c });
    try {
      await ds.transaction(async (m) => {
        await m.getRepository("Customer").save({ email: "rolled@example.com" });
        throw new Error("roll back");
      });
    } catch (e) {}
  }
  const found = await customers.find({ relations: { orders: true }, order: { id: "ASC" } });
  console.log(`${step}: ` + JSON.stringify(found.map((c) => ({
    email: c.email, vip: c.vip, tier: c.tier, created: !!c.created,
    orders: c.orders.map((o) => [o.qty, o.total]).sort(),
  }))));
  await ds.destroy();
}

(async () => {
  await run("first");
  await run("second");
})().catch((e) => { console.log("error: " + (e && e.message)); process.exit(1); });
