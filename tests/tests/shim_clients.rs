//! server-shim against clients and data nobody here wrote: the MySQL
//! "world" sample database, as Debian's MariaDB test suite ships it, loaded unchanged through
//! the relay with the stock `mariadb` CLI and queried next to a real MariaDB; and SQLAlchemy (on PyMySQL)
//! creating, filling, querying and reflecting a declarative model.
//!
//! Needs `mariadb-test-data` (the world files), `mariadb-server` and `sqlalchemy`; the
//! project's `scripts/test` installs them. Build the binary first:
//! `cargo build -p server-shim && cargo test -p tests --test shim_clients`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{
    ChildGuard, Shim, TempDir, free_port, mariadb, mariadb_script, ok, python, shim_with_admin,
    wait_for_greeting,
};

const PW: &str = "root-secret-pw";

/// Where `mariadb-test-data` installs the world database's schema and rows.
const WORLD_DIR: &str = "/usr/share/mysql/mysql-test/include";

fn shim(tmp: &TempDir) -> Shim {
    shim_with_admin(tmp, "root", PW)
}

/// `world_schema.inc` then `world.inc`, as shipped. They are mysqltest include files, which
/// may hold mysqltest commands (lines starting with `--`); those lines, and only those, are
/// removed. (The files shipped with MariaDB 10.11 have none: the SQL is loaded byte for byte.)
fn world_script() -> String {
    let mut script = String::new();
    for file in ["world_schema.inc", "world.inc"] {
        let path = Path::new(WORLD_DIR).join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (install the Debian package mariadb-test-data)",
                path.display()
            )
        });
        for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
            script.push_str(line);
            script.push('\n');
        }
    }
    script
}

/// Queries whose output the shim must print exactly as MariaDB does: counts, joins with
/// GROUP BY, ORDER BY with LIMIT (both forms), subqueries, LIKE, float and text functions,
/// and `SurfaceArea`, a `float(10,2)`, with its two decimals.
const WORLD_QUERIES: &str = "
SELECT COUNT(*) FROM Country;
SELECT COUNT(*) FROM City;
SELECT COUNT(*) FROM CountryLanguage;
SELECT co.Name, COUNT(ci.ID) AS cities, SUM(ci.Population) AS pop FROM Country co
  JOIN City ci ON ci.Country = co.Code GROUP BY co.Code, co.Name
  ORDER BY cities DESC, co.Name LIMIT 5;
SELECT Name, Population FROM City ORDER BY Population DESC, Name LIMIT 10;
SELECT Name, Population FROM City ORDER BY Population DESC LIMIT 5, 3;
SELECT c.Name, ci.Name FROM Country c JOIN City ci ON ci.ID = c.Capital
  WHERE c.Code IN ('NLD', 'FRA', 'JPN', 'BRA') ORDER BY c.Name;
SELECT Language, COUNT(*) AS n FROM CountryLanguage GROUP BY Language HAVING n >= 15
  ORDER BY n DESC, Language;
SELECT COUNT(*) FROM Country WHERE Capital IS NULL;
SELECT Name FROM Country WHERE Name LIKE 'united%' ORDER BY Name;
SELECT Country, Language, Percentage FROM CountryLanguage WHERE Country = 'CHE'
  ORDER BY Percentage DESC;
SELECT COUNT(DISTINCT Country) FROM City;
SELECT SUM(Population) FROM Country;
SELECT co.Name, ci.Name, ci.Population FROM Country co JOIN City ci ON ci.Country = co.Code
  WHERE ci.Population = (SELECT MAX(Population) FROM City c2 WHERE c2.Country = co.Code)
  AND co.Population > 100000000 ORDER BY co.Name;
SELECT Name FROM Country WHERE Code NOT IN (SELECT DISTINCT Country FROM City)
  ORDER BY Name LIMIT 5;
SELECT CONCAT(Name, ' (', Code, ')') FROM Country WHERE Name = 'NETHERLANDS';
SELECT ROUND(AVG(Population)) FROM City WHERE Country = 'NLD';
SELECT Name, SurfaceArea FROM Country ORDER BY SurfaceArea DESC, Name LIMIT 3;
SELECT Name, SurfaceArea, Percentage FROM Country JOIN CountryLanguage ON Code = Country
  WHERE Language = 'Dutch' ORDER BY Name;
";

/// A private MariaDB on a free port (killed on drop), for the same queries.
fn start_mariadb(dir: &Path) -> (ChildGuard, u16) {
    let datadir = tests::mariadb::install(dir);
    let port = free_port();
    let argv: Vec<String> = tests::mariadb::command(&datadir, &[])
        .into_iter()
        .map(|a| a.replace("{COMPUTE_PORT}", &port.to_string()))
        .collect();
    let log = std::fs::File::create(dir.join("mariadbd.log")).unwrap();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", argv[0]));
    let guard = ChildGuard::new(child);
    if let Err(e) = wait_for_greeting(port, Instant::now(), Duration::from_secs(60)) {
        panic!(
            "{e}\nmariadbd log:\n{}",
            std::fs::read_to_string(dir.join("mariadbd.log")).unwrap_or_default()
        );
    }
    (guard, port)
}

#[test]
fn world_sample_database_loads_and_answers_like_mariadb() {
    let tmp = TempDir::new("shim-clients-world");
    // Through the relay, as a user meets it: the instance starts paused, the first login of
    // the load wakes the shim, and every statement is relayed.
    let relay_dir = tmp.path().join("relay");
    std::fs::create_dir_all(&relay_dir).unwrap();
    let relay = Relay::start(&relay_dir, RelayOptions::default());
    let port = relay.port;
    let script = world_script();
    ok(&mariadb(
        port,
        USER,
        Some(PASSWORD),
        &[],
        "CREATE DATABASE world",
    ));
    // The file ends with `ANALYZE TABLE Country, City, CountryLanguage`, answered per table.
    assert_eq!(
        ok(&mariadb_script(
            port,
            USER,
            Some(PASSWORD),
            &["world"],
            &script
        )),
        "world.Country\tanalyze\tstatus\tOK\n\
         world.City\tanalyze\tstatus\tOK\n\
         world.CountryLanguage\tanalyze\tstatus\tOK\n"
    );

    let shim_out = ok(&mariadb_script(
        port,
        USER,
        Some(PASSWORD),
        &["world"],
        WORLD_QUERIES,
    ))
    .to_owned();
    // Known facts of the world database, independent of MariaDB.
    let lines: Vec<&str> = shim_out.lines().collect();
    assert_eq!(lines[..3], ["239", "4079", "984"], "{shim_out}");
    assert_eq!(
        lines[3..8],
        [
            "China\t363\t175953614",
            "India\t341\t123298526",
            "United States\t274\t78625774",
            "Brazil\t250\t85876862",
            "Japan\t248\t77965107",
        ],
        "{shim_out}"
    );
    assert_eq!(
        lines[8..11],
        [
            "Mumbai (Bombay)\t10500000",
            "Seoul\t9981619",
            "São Paulo\t9968485"
        ],
        "{shim_out}"
    );
    assert_eq!(
        lines[18..21],
        [
            "Karachi\t9269265",
            "Istanbul\t8787958",
            "Ciudad de México\t8591309"
        ],
        "{shim_out}"
    );

    // The same data and queries on a real MariaDB print the same.
    let (_mariadbd, mariadb_port) = start_mariadb(tmp.path());
    ok(&mariadb(
        mariadb_port,
        "root",
        None,
        &[],
        "CREATE DATABASE world",
    ));
    ok(&mariadb_script(
        mariadb_port,
        "root",
        None,
        &["world"],
        &script,
    ));
    let mariadb_out = ok(&mariadb_script(
        mariadb_port,
        "root",
        None,
        &["world"],
        WORLD_QUERIES,
    ))
    .to_owned();
    assert_eq!(shim_out, mariadb_out);
}

/// A declarative model with the everyday column types, created, filled and queried through the
/// ORM, then reflected the way SQLAlchemy's MySQL dialect does it (`SHOW CREATE TABLE`).
const SQLALCHEMY: &str = r#"
import datetime, decimal, os, warnings
warnings.simplefilter("error")  # an unrecognised reflected type is a failure
from sqlalchemy import (Boolean, DateTime, ForeignKey, Index, Integer, Numeric, String,
                        create_engine, inspect, select)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

class Base(DeclarativeBase):
    pass

class Author(Base):
    __tablename__ = "authors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    books: Mapped[list["Book"]] = relationship(back_populates="author")

class Book(Base):
    __tablename__ = "books"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    title: Mapped[str] = mapped_column(String(40))
    price: Mapped[decimal.Decimal] = mapped_column(Numeric(10, 2))
    published: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    in_print: Mapped[bool] = mapped_column(Boolean, default=True)
    author_id: Mapped[int] = mapped_column(ForeignKey("authors.id"))
    author: Mapped[Author] = relationship(back_populates="books")
    __table_args__ = (Index("ix_books_title", "title"),)

engine = create_engine(f"mysql+pymysql://root:{os.environ['PW']}@127.0.0.1:{os.environ['PORT']}/lib")
Base.metadata.create_all(engine)
with Session(engine) as s:
    le = Author(name="Ursula K. Le Guin")
    pr = Author(name="Terry Pratchett")
    s.add_all([
        Book(title="The Dispossessed", price=decimal.Decimal("9.99"),
             published=datetime.datetime(1974, 5, 1, 10, 30), author=le),
        Book(title="A Wizard of Earthsea", price=decimal.Decimal("7.50"),
             published=datetime.datetime(1968, 11, 1), author=le, in_print=False),
        Book(title="Small Gods", price=decimal.Decimal("8.25"), published=None, author=pr),
    ])
    s.commit()
    print("ids", le.id, pr.id)
    q = (select(Author.name, Book.title, Book.price, Book.published, Book.in_print)
         .join(Book.author).where(Book.price > decimal.Decimal("8"))
         .order_by(Book.price.desc()))
    for row in s.execute(q):
        print("row", tuple(row))
    b = s.scalars(select(Book).where(Book.title == "a wizard of earthsea")).one()
    print("obj", b.id, b.title, b.author.name, repr(b.price), repr(b.published), b.in_print)
insp = inspect(engine)
print("tables", insp.get_table_names())
for c in insp.get_columns("books"):
    print("col", c["name"], c["type"], c["nullable"], c.get("autoincrement"))
print("pk", insp.get_pk_constraint("books")["constrained_columns"])
print("idx", sorted((i["name"], i["column_names"], bool(i["unique"])) for i in insp.get_indexes("books")))
print("uidx", sorted((i["name"], i["column_names"], bool(i["unique"])) for i in insp.get_indexes("authors")))
print("fk", [(f["constrained_columns"], f["referred_table"], f["referred_columns"])
             for f in insp.get_foreign_keys("books")])
"#;

#[test]
fn sqlalchemy_creates_queries_and_reflects_a_model() {
    let tmp = TempDir::new("shim-clients-sqlalchemy");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb(port, "root", Some(PW), &[], "CREATE DATABASE lib"));
    let code = format!("import os\nos.environ['PW'] = {PW:?}\n{SQLALCHEMY}");
    let out = python(port, &code, Duration::from_secs(60));
    assert_eq!(
        ok(&out),
        "ids 1 2\n\
         row ('Ursula K. Le Guin', 'The Dispossessed', Decimal('9.99'), \
         datetime.datetime(1974, 5, 1, 10, 30), True)\n\
         row ('Terry Pratchett', 'Small Gods', Decimal('8.25'), None, True)\n\
         obj 2 A Wizard of Earthsea Ursula K. Le Guin Decimal('7.50') \
         datetime.datetime(1968, 11, 1, 0, 0) False\n\
         tables ['authors', 'books']\n\
         col id INTEGER False True\n\
         col title VARCHAR(40) False None\n\
         col price NUMERIC(10, 2) False None\n\
         col published DATETIME True None\n\
         col in_print TINYINT False False\n\
         col author_id INTEGER False False\n\
         pk ['id']\n\
         idx [('ix_books_title', ['title'], False)]\n\
         uidx [('name', ['name'], True)]\n\
         fk [(['author_id'], 'authors', ['id'])]\n",
        "stderr: {}",
        out.stderr
    );
}

/// Runs `each` first against server-shim, then against a private MariaDB, each with an empty
/// database `db` (root's password is `Some` on the shim, none on MariaDB) and a directory of
/// its own; what `each` returned for each.
fn on_shim_then_mariadb(
    label: &str,
    db: &str,
    mut each: impl FnMut(u16, Option<&str>, &Path) -> String,
) -> [String; 2] {
    let tmp = TempDir::new(label);
    let shim = shim(&tmp);
    let (_mariadbd, mariadb_port) = start_mariadb(tmp.path());
    [(shim.port, Some(PW)), (mariadb_port, None)].map(|(port, password)| {
        ok(&mariadb(
            port,
            "root",
            password,
            &[],
            &format!("CREATE DATABASE {db}"),
        ));
        let dir = tmp.path().join(format!("work-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        each(port, password, &dir)
    })
}

/// Runs `each` (port, user, password, a work directory) on server-shim through the relay,
/// from a paused instance (its first connection wakes it), then on MariaDB 10.11 with a
/// database `db` created on each; returns what each run returned.
fn through_relay_then_mariadb(
    label: &str,
    db: &str,
    mut each: impl FnMut(u16, &str, Option<&str>, &Path) -> String,
) -> [String; 2] {
    let tmp = TempDir::new(label);
    let relay = Relay::start(tmp.path(), RelayOptions::default());
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        &format!("CREATE DATABASE {db}"),
    ));
    relay.pause();
    let (_mariadbd, mariadb_port) = start_mariadb(tmp.path());
    ok(&mariadb(
        mariadb_port,
        "root",
        None,
        &[],
        &format!("CREATE DATABASE {db}"),
    ));
    let runs = [
        (relay.port, USER, Some(PASSWORD)),
        (mariadb_port, "root", None),
    ];
    let out = runs.map(|(port, user, password)| {
        let dir = tmp.path().join(format!("work-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        each(port, user, password, &dir)
    });
    assert!(relay.logged("resuming"), "{}", relay.log());
    out
}

/// Runs `cmd` (given `timeout`), which must succeed (`what` names it in the failure).
fn succeeded(cmd: &mut Command, timeout: Duration, what: &str) -> tests::Output {
    let out = tests::run_with_input(cmd, b"", timeout);
    assert_eq!(out.code, Some(0), "{what}:\n{}\n{}", out.stdout, out.stderr);
    out
}

/// Runs the test project's `manage.py` (tests/clients/django) with `args` against the database
/// `db` on `port`; the command's output.
fn django(port: u16, db: &str, user: &str, password: Option<&str>, args: &[&str]) -> String {
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/django");
    let mut cmd = Command::new("python3");
    cmd.arg(project.join("manage.py"))
        .args(args)
        .current_dir(&project)
        .env("DB_PORT", port.to_string())
        .env("DB_NAME", db)
        .env("DB_USER", user)
        .env("DB_PASSWORD", password.unwrap_or(""))
        .env("DJANGO_SUPERUSER_PASSWORD", "s3cret-admin")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = succeeded(
        &mut cmd,
        Duration::from_secs(300),
        &format!("manage.py {args:?} on port {port}"),
    );
    format!("{}{}", out.stdout, out.stderr)
}

/// Django 5.2 on server-shim (through the relay, from a paused instance) as on MariaDB:
/// `migrate` (its `auth` migrations add foreign keys
/// and change columns with `ALTER TABLE`; the app's own drop a unique constraint and point a
/// foreign key at another table), `createsuperuser`, and `manage.py test` of a small app (a
/// test database created and dropped, decimals, many-to-many, savepoints). Needs Django
/// (`scripts/test` installs it).
#[test]
fn django_migrates_creates_a_superuser_and_passes_its_tests_as_on_mariadb() {
    through_relay_then_mariadb(
        "shim-clients-django",
        "site",
        |port, user, password, dir| {
            let migrated = django(port, "site", user, password, &["migrate", "--noinput"]);
            assert!(
                migrated.contains("Applying auth.0001_initial... OK")
                    && migrated.contains("Applying notes.0001_initial... OK")
                    && migrated.contains("Applying notes.0003_alter_label... OK"),
                "{migrated}"
            );
            let created = django(
                port,
                "site",
                user,
                password,
                &[
                    "createsuperuser",
                    "--noinput",
                    "--username",
                    "admin",
                    "--email",
                    "admin@example.com",
                ],
            );
            assert!(created.contains("Superuser created"), "{created}");
            let admins = ok(&mariadb(
                port,
                user,
                password,
                &["site"],
                "SELECT username FROM auth_user WHERE is_superuser",
            ))
            .to_owned();
            assert_eq!(admins, "admin\n");
            // A fixture dumped, the database flushed, the fixture loaded again: loaddata checks
            // the foreign keys it loaded through information_schema (before: ERR 1146 on
            // `TABLE_CONSTRAINTS`, then on `CHECK_CONSTRAINTS`).
            django(
                port,
                "site",
                user,
                password,
                &[
                    "shell",
                    "-c",
                    "from notes.models import Note, Tag\n\
                 from django.contrib.auth.models import User\n\
                 t = Tag.objects.create(name='x')\n\
                 n = Note.objects.create(title='hi', author=User.objects.get(username='admin'))\n\
                 n.tags.add(t)",
                ],
            );
            let fixture = dir.join("fixture.json").display().to_string();
            django(
                port,
                "site",
                user,
                password,
                &["dumpdata", "auth.user", "notes", "--output", &fixture],
            );
            django(port, "site", user, password, &["flush", "--noinput"]);
            let loaded = django(port, "site", user, password, &["loaddata", &fixture]);
            assert!(loaded.contains("Installed 3 object(s)"), "{loaded}");
            let counts = ok(&mariadb(
                port,
                user,
                password,
                &["site", "-N"],
                "SELECT (SELECT COUNT(*) FROM notes_note), (SELECT COUNT(*) FROM notes_note_tags), \
             (SELECT COUNT(*) FROM auth_user)",
            ))
            .to_owned();
            assert_eq!(counts, "1\t1\t1\n", "port {port}");
            // Migrations 0002 and 0003: a unique constraint dropped (two labels with one code),
            // a foreign key pointed at another table (a dangling owner refused by the new one).
            let labelled = django(
                port,
                "site",
                user,
                password,
                &[
                    "shell",
                    "-c",
                    "from django.db import IntegrityError, transaction\n\
                 from notes.models import Label, Note\n\
                 n = Note.objects.create(title='labelled')\n\
                 Label.objects.create(code='a', owner=n)\n\
                 Label.objects.create(code='a')\n\
                 try:\n\
                 \x20   with transaction.atomic():\n\
                 \x20       Label.objects.create(code='b', owner_id=n.pk + 1000)\n\
                 \x20   print('dangling owner accepted')\n\
                 except IntegrityError:\n\
                 \x20   print('dangling owner refused')\n\
                 print(sorted(Label.objects.values_list('code', flat=True)))",
                ],
            );
            assert!(
                labelled.ends_with("dangling owner refused\n['a', 'a']\n"),
                "port {port}: {labelled}"
            );
            let catalog = ok(&mariadb(
                port,
                user,
                password,
                &["-N"],
                "SELECT (SELECT GROUP_CONCAT(REFERENCED_TABLE_NAME) FROM \
             information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = 'site' AND \
             TABLE_NAME = 'notes_label' AND REFERENCED_TABLE_NAME IS NOT NULL), \
             (SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'site' \
             AND TABLE_NAME = 'notes_label' AND NON_UNIQUE = 0)",
            ))
            .to_owned();
            assert_eq!(catalog, "notes_note\t1\n", "port {port}");
            let tested = django(
                port,
                "site",
                user,
                password,
                &["test", "notes", "--noinput"],
            );
            assert!(
                tested.contains("Ran 2 tests") && tested.contains("\nOK"),
                "{tested}"
            );
            // The test database is gone again.
            let left = ok(&mariadb(
                port,
                user,
                password,
                &[],
                "SHOW DATABASES LIKE 'test_site'",
            ))
            .to_owned();
            assert_eq!(left, "", "port {port}");
            String::new()
        },
    );
}

/// Alembic on server-shim as on MariaDB (tests/clients/alembic/run.py): a model
/// autogenerated and upgraded, autogenerate again finding nothing, a column widened
/// (`alter_column`: `MODIFY`) and one added, upgraded, and autogenerate finding nothing once
/// more. Needs Alembic (`scripts/test` installs it).
#[test]
fn alembic_autogenerates_and_upgrades_twice_as_on_mariadb() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/alembic/run.py");
    let found = on_shim_then_mariadb("shim-clients-alembic", "app", |port, password, work| {
        let url = format!(
            "mysql+pymysql://root:{}@127.0.0.1:{port}/app",
            password.unwrap_or("")
        );
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .env("WORK", work)
            .env("DB_URL", url)
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let out = succeeded(&mut cmd, Duration::from_secs(300), &format!("port {port}"));
        // Alembic's own "Generating ..." lines aside.
        out.stdout
            .lines()
            .filter(|l| {
                ["first ", "again ", "change ", "after ", "title ", "head "]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    assert_eq!(
        found[0],
        "first ['op.create_index', 'op.create_table']\n\
         again []\n\
         change ['op.add_column', 'op.alter_column']\n\
         after []\n\
         title 120 in_print False\n\
         head True"
    );
    assert_eq!(found[0], found[1], "server-shim, then MariaDB");
}

/// WordPress 6.1 (Debian's package, extracted by tests/clients/install) installs on
/// server-shim from php-cli as `wp-admin/install.php` would, then writes, tags, searches
/// (`SQL_CALC_FOUND_ROWS` with `FOUND_ROWS()`) and trashes a post and purges expired
/// transients (a self-join `DELETE`), printing the same as on MariaDB, down to every statement
/// WordPress saw fail (its installer describes tables before creating them).
#[test]
fn wordpress_installs_and_publishes_a_post_as_on_mariadb() {
    let root = tests::target_dir().join("clients/wordpress/usr/share/wordpress");
    assert!(
        root.join("wp-settings.php").exists(),
        "{} is missing: run tests/clients/install",
        root.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/wordpress/install.php");
    let printed = on_shim_then_mariadb("shim-clients-wordpress", "blog", |port, password, _| {
        let mut cmd = Command::new("php");
        cmd.arg(&script)
            .env("WP_ROOT", &root)
            .env("PORT", port.to_string())
            .env("DB_NAME", "blog")
            .env("DB_USER", "root")
            .env("DB_PASSWORD", password.unwrap_or(""));
        succeeded(&mut cmd, Duration::from_secs(120), &format!("port {port}")).stdout
    });
    assert!(
        printed[0].starts_with(
            "installed user 1\n\
             blogname Perceptron blog\n\
             tables 12\n\
             admin admin@example.com password ok\n\
             post Paused databases cost nothing\n\
             tags mysql,serverless\n\
             published 2\n\
             search 1\n\
             transients gone=false kept=y rows=2\n\
             after trash published 1\n"
        ),
        "{}",
        printed[0]
    );
    assert_eq!(printed[0], printed[1], "server-shim, then MariaDB");
}

/// A Go program on go-sql-driver/mysql (tests/clients/go/types) scans decimals and date-times,
/// aggregates of them, a NULL, and the same through a prepared statement, into float64,
/// string and time.Time, on server-shim exactly as on MariaDB. Built by
/// tests/clients/install.
#[test]
fn go_scans_decimals_and_times_as_on_mariadb() {
    let program = tests::target_dir().join("clients/go/types");
    assert!(
        program.exists(),
        "{} is missing: run tests/clients/install",
        program.display()
    );
    let printed = on_shim_then_mariadb("shim-clients-go", "shop", |port, password, _| {
        let mut cmd = Command::new(&program);
        cmd.env("PORT", port.to_string())
            .env("DB_USER", "root")
            .env("DB_PASSWORD", password.unwrap_or(""))
            .env("DB_NAME", "shop");
        succeeded(&mut cmd, Duration::from_secs(60), &format!("port {port}")).stdout
    });
    assert_eq!(
        printed[0],
        "sum 13.50 avg 6.750000 float 13.5 count 2\n\
         min 2020-01-01T10:00:00Z max 2021-03-04T05:06:07Z\n\
         row 1 5 2020-01-01T10:00:00Z true a\n\
         row 2 8.5 2021-03-04T05:06:07Z false \n\
         prepared 2021-03-04T05:06:07Z 13.50\n"
    );
    assert_eq!(printed[0], printed[1], "server-shim, then MariaDB");
}

/// A BLOB column comes back as bytes, as on MariaDB: PyMySQL stores the 256 byte values in a
/// BLOB (its own `test_BLOB`'s data, as one multi-row `INSERT`), reads them back whole with
/// the text protocol, sees the column's character set `binary` (63), and its next command on
/// the same connection works. (The shim sent every column as utf8: PyMySQL failed to decode
/// the bytes and left the result unread, so its next command read leftovers.)
#[test]
fn pymysql_reads_back_the_bytes_it_stored_in_a_blob_as_on_mariadb() {
    let code = r#"
import os, pymysql
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="root",
                    password=os.environ.get("PW") or "", database="bin", binary_prefix=True)
cur = c.cursor()
cur.execute("CREATE TABLE t (i INT, b BLOB, s TEXT)")
data = bytes(range(256)) * 16
cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, data, "é" * i) for i in range(10)])
cur.execute("SELECT b, s FROM t ORDER BY i")
rows = cur.fetchall()
print("rows", len(rows), all(b == data for b, _ in rows), rows[3][1])
print("blob charset", cur._result.fields[0].charsetnr)
cur.execute("SELECT COUNT(*) FROM t")
print("next", cur.fetchone())
"#;
    let printed = on_shim_then_mariadb("shim-clients-blob", "bin", |port, password, _| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", code])
            .env("PORT", port.to_string())
            .env("PW", password.unwrap_or(""));
        succeeded(&mut cmd, Duration::from_secs(60), &format!("port {port}")).stdout
    });
    assert_eq!(
        printed[0],
        "rows 10 True ééé\nblob charset 63\nnext (10,)\n"
    );
    assert_eq!(printed[0], printed[1], "server-shim, then MariaDB");
}

/// TypeORM 0.3 (`tests/clients/node/typeorm.js`): a first start synchronizes the schema of two
/// entities (a boolean, an ENUM, `CURRENT_TIMESTAMP(6)` create and update dates, a DECIMAL, a
/// foreign key with `ON DELETE CASCADE`), saves rows that leave columns to their defaults
/// (`VALUES (DEFAULT, ...)`), reads them back with their relation, and rolls a transaction
/// back; a second start finds the schema as its entities say and reads the same rows. On
/// server-shim through the relay, from a paused instance, and on MariaDB: the same rows. The
/// second start on server-shim has nothing to change (on MariaDB 10.11 TypeORM itself finds 4
/// changes it makes again each start, so only the shim's count is held to 0). Before: no row
/// could be inserted (`DEFAULT` in `VALUES`), the first synchronize failed on
/// `CURRENT_TIMESTAMP(6)`, a `TINYINT` boolean read back as true, and the second start dropped
/// a foreign key (`information_schema` had none) and an ENUM column (shown as `text`).
#[test]
fn typeorm_synchronizes_twice_and_saves_rows_with_defaults_as_on_mariadb() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node/typeorm.js");
    let run = |port: u16, user: &str, password: &str| {
        let mut cmd = Command::new("node");
        cmd.arg(&script)
            .current_dir(script.parent().unwrap())
            .env("PORT", port.to_string())
            .env("DB_USER", user)
            .env("DB_PASSWORD", password)
            .env("DB_NAME", "orm");
        succeeded(
            &mut cmd,
            Duration::from_secs(120),
            &format!("TypeORM on port {port}"),
        )
        .stdout
    };
    let tmp = TempDir::new("shim-clients-typeorm");
    let relay = Relay::start(tmp.path(), RelayOptions::default());
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "CREATE DATABASE orm",
    ));
    relay.pause();
    let on_shim = run(relay.port, USER, PASSWORD);
    assert!(relay.logged("resuming"), "{}", relay.log());
    let (_mariadbd, mariadb_port) = start_mariadb(tmp.path());
    ok(&mariadb(
        mariadb_port,
        "root",
        None,
        &[],
        "CREATE DATABASE orm",
    ));
    let on_mariadb = run(mariadb_port, "root", "");
    let rows = "[{\"email\":\"a@example.com\",\"vip\":false,\"tier\":\"free\",\"created\":true,\
                \"orders\":[[1,\"0.00\"],[3,\"12.50\"]]}]";
    assert_eq!(
        on_shim,
        format!(
            "first: synchronized\nfirst: {rows}\nsecond: 0 schema changes pending\nsecond: {rows}\n"
        )
    );
    let data = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| !l.contains("schema changes pending"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        data(&on_shim),
        data(&on_mariadb),
        "server-shim, then MariaDB"
    );
}

/// Drizzle (`tests/clients/node/drizzle.js`): `drizzle-kit push` creates the schema (a
/// boolean, a `DECIMAL` and `(now())` defaults, a unique key, a foreign key, a JSON column),
/// and a second push reads it back through `information_schema` and finds nothing to change;
/// rows inserted in one batch that leave different columns to their defaults, and a JSON
/// document, read back as on MariaDB. On server-shim through the relay, from a paused
/// instance. Before: the push exited 1 without a word (`information_schema` had no
/// `TABLE_CONSTRAINTS`); once it had, every push altered five columns again (defaults shown
/// with their quotes, `true` for 1, lower-case names from `information_schema`), the batch
/// insert got 1235 and the JSON column came back as a string. On MariaDB 10.11 the second
/// push itself exits 1, so MariaDB gives only the rows. A relational query (each user with
/// its posts, one statement) reads its JSON column as an object.
#[test]
fn drizzle_pushes_twice_and_inserts_rows_with_defaults_and_json_as_on_mariadb() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node/drizzle.js");
    let run = |step: &str, port: u16, user: &str, password: &str| {
        let mut cmd = Command::new("node");
        cmd.arg(&script)
            .arg(step)
            .current_dir(script.parent().unwrap())
            .env("PORT", port.to_string())
            .env("DB_USER", user)
            .env("DB_PASSWORD", password)
            .env("DB_NAME", "orm");
        succeeded(
            &mut cmd,
            Duration::from_secs(120),
            &format!("Drizzle {step} on port {port}"),
        )
        .stdout
    };
    let tmp = TempDir::new("shim-clients-drizzle");
    let relay = Relay::start(tmp.path(), RelayOptions::default());
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "CREATE DATABASE orm",
    ));
    relay.pause();
    assert_eq!(run("push", relay.port, USER, PASSWORD), "push: applied\n");
    assert!(relay.logged("resuming"), "{}", relay.log());
    assert_eq!(
        run("push", relay.port, USER, PASSWORD),
        "push: no changes\n"
    );
    let on_shim = run("rows", relay.port, USER, PASSWORD);
    // A relational query: Drizzle reads back what JSON_ARRAYAGG(JSON_ARRAY(...)) wrote. The
    // JSON column is an object in it (it was a string holding the document) and the DECIMAL
    // has its scale (0.00, which JavaScript reads as 0). MariaDB 10.11 refuses the statement
    // (a correlated name inside a derived table), so this is checked against the rows the
    // plain selects above read back.
    assert_eq!(
        run("nested", relay.port, USER, PASSWORD),
        "[{\"name\":\"ada\",\"posts\":[{\"title\":\"first\",\"meta\":{\"tags\":[\"a\",\"b\"],\
         \"n\":1.5,\"ok\":true},\"price\":\"0\"},{\"title\":\"second\",\"meta\":null,\
         \"price\":\"12.5\"}]},{\"name\":\"bob\",\"posts\":[]}]\n"
    );
    let (_mariadbd, mariadb_port) = start_mariadb(tmp.path());
    ok(&mariadb(
        mariadb_port,
        "root",
        None,
        &[],
        "CREATE DATABASE orm",
    ));
    assert_eq!(run("push", mariadb_port, "root", ""), "push: applied\n");
    let on_mariadb = run("rows", mariadb_port, "root", "");
    assert_eq!(
        on_shim,
        "{\"users\":[[\"ada\",\"ada@example.com\",true,true],[\"bob\",\"bob@example.com\",false,true]],\
         \"posts\":[[\"first\",{\"tags\":[\"a\",\"b\"],\"n\":1.5,\"ok\":true},\"0.00\"],[\"second\",null,\"12.50\"]]}\n"
    );
    assert_eq!(on_shim, on_mariadb, "server-shim, then MariaDB");
}
