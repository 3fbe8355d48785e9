//! `[instance.offload]`: a paused instance's data goes to the object store (a local directory,
//! or a real S3-compatible server on loopback) and comes back before the next compute starts;
//! a store that cannot give it back fails the wake with 1053 and never starts a compute on an
//! empty directory.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::path::Path;
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use tests::{TempDir, Tmpfs, mariadb, ok};

const WITHIN: Duration = Duration::from_secs(60);

/// Where the admin API says the instance's data is.
fn storage(relay: &Relay) -> String {
    relay.instance_field("storage")
}

/// Pauses the instance as its idle pause would (the tests' instances pause only when told, so
/// that no timer races the test's own steps) and waits until its compute has stopped.
fn pause(relay: &Relay) {
    relay.pause();
    relay.wait_state("paused", WITHIN);
}

/// Pauses the instance and asks for its data to be offloaded now (the tests' `after` is an
/// hour), without waiting for the offload to end.
fn offload_now(relay: &Relay) {
    pause(relay);
    let (code, body) = relay.admin("POST", "/v1/instances/demo/offload");
    assert_eq!(code, 202, "{body}\n{}", relay.log());
}

/// Pauses the instance, offloads its data now, and waits until it is in the store only.
fn wait_offloaded(relay: &Relay) {
    offload_now(relay);
    wait_storage(relay, "offloaded");
}

/// Creates `shop.t` with one row named `name`, through the relay (waking the instance).
fn put_row(relay: &Relay, name: &str) {
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        &format!(
            "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, name VARCHAR(40)); \
             INSERT INTO shop.t VALUES (1, '{name}')"
        ),
    ));
}

/// Reads the row back through the relay (waking the instance).
fn get_row(relay: &Relay) -> tests::Output {
    mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &["-N"],
        "SELECT name FROM shop.t WHERE id = 1",
    )
}

fn chunk_files(store: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for fan in std::fs::read_dir(store.join("chunks")).unwrap() {
        for chunk in std::fs::read_dir(fan.unwrap().path()).unwrap() {
            files.push(chunk.unwrap().path());
        }
    }
    files.sort();
    files
}

/// A relay whose instance offloads into `<tmp>/objects` once paused for `after`.
fn offloading_relay(tmp: &TempDir, after: &str) -> Relay {
    Relay::start(
        tmp.path(),
        RelayOptions {
            instance_toml: format!(
                "[instance.offload]\nstore = \"file://{}\"\nafter = \"{after}\"\ndata_dir = \"data\"\n",
                tmp.path().join("objects").display()
            ),
            ..RelayOptions::default()
        },
    )
}

#[test]
fn paused_data_goes_to_the_store_and_a_wake_brings_it_back_or_refuses() {
    let tmp = TempDir::new("relay-offload");
    let store = tmp.path().join("objects");
    let data = tmp.path().join("data");
    let relay = offloading_relay(&tmp, "1s");
    assert_eq!(storage(&relay), "local");
    put_row(&relay, "kept across the store");

    // Paused, then offloaded once `after` has passed: the local copy is gone, the store has
    // the manifest.
    pause(&relay);
    wait_storage(&relay, "offloaded");
    assert!(!data.exists(), "the local copy is removed");
    let manifests = std::fs::read_dir(store.join("instances/demo"))
        .unwrap()
        .count();
    assert_eq!(manifests, 1, "one manifest, named by its digest");
    assert_eq!(
        relay.metric("relay_instance_data{instance=\"demo\",place=\"offloaded\"}"),
        1.0
    );
    assert_eq!(
        relay.metric("relay_instance_data{instance=\"demo\",place=\"local\"}"),
        0.0
    );
    assert!(relay.logged("offloaded: the data is in the store only"));
    // The ledger meters the data: local while paused, then the stored copy (a few bytes are
    // left local at most: the marker is beside the directory, not in it).
    let storage_lines = || -> Vec<(u64, u64)> {
        std::fs::read_to_string(tmp.path().join("state/usage.ledger"))
            .unwrap()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.len() == 5 && f[2] == "storage")
                    .then(|| (f[3].parse().unwrap(), f[4].parse().unwrap()))
            })
            .collect()
    };
    let lines = storage_lines();
    let (local_paused, _) = lines[0];
    assert!(local_paused > 0, "{lines:?}");
    let (local, stored) = *lines.last().unwrap();
    assert_eq!(local, 0, "{lines:?}");
    assert!(stored > 0, "{lines:?}");
    let (code, usage) = relay.admin("GET", "/v1/usage");
    assert_eq!(code, 200, "{usage}");
    // Every hour's (a run that crosses an hour has two lines).
    let stored_gib_hours: f64 = usage
        .split("\"stored_gib_hours\": ")
        .skip(1)
        .filter_map(|rest| rest.split(['\n', ',']).next())
        .filter_map(|n| n.trim().parse::<f64>().ok())
        .sum();
    assert!(stored_gib_hours > 0.0, "{usage}");

    // A login wakes it: the data is restored before the compute starts (the database lazily:
    // filled in behind the compute, a few pages here).
    assert_eq!(ok(&get_row(&relay)).trim(), "kept across the store");
    wait_storage(&relay, "local");
    assert!(data.is_dir(), "the data directory is back");
    assert!(relay.logged("restored"), "{}", relay.log());

    // Offloaded again; then a chunk corrupted in the store: the wake fails with 1053, the
    // log names the object, and no compute starts on an empty directory.
    wait_offloaded(&relay);
    let chunks = chunk_files(&store);
    let bad = chunks.first().expect("the store holds chunks");
    std::fs::write(bad, b"not what was offloaded").unwrap();
    let out = get_row(&relay);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    let name = bad.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        relay
            .log()
            .lines()
            .any(|l| l.contains("cannot restore the offloaded data") && l.contains(&name)),
        "{}",
        relay.log()
    );
    assert!(
        !data.exists(),
        "never an empty directory in place of the data"
    );
    assert!(!relay.compute_listening());
    assert_eq!(storage(&relay), "offloaded");
}

/// A relay offloading to `server`'s bucket `perceptron` under `objects/eu`, signing with the
/// key pair in an owner-only credentials file holding `secret`.
fn s3_relay(tmp: &TempDir, server: &S3Server, secret: &str) -> Relay {
    s3_relay_with(tmp, server, secret, RelayOptions::default())
}

/// [`s3_relay`] with `options` (its `instance_toml` is replaced).
fn s3_relay_with(tmp: &TempDir, server: &S3Server, secret: &str, options: RelayOptions) -> Relay {
    use std::os::unix::fs::OpenOptionsExt as _;
    let credentials = tmp.path().join("s3-credentials.toml");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&credentials)
        .unwrap();
    std::io::Write::write_all(
        &mut file,
        format!("access_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{secret}\"\n").as_bytes(),
    )
    .unwrap();
    Relay::start(
        tmp.path(),
        RelayOptions {
            instance_toml: format!(
                "[instance.offload]\nstore = \"s3://perceptron/objects/eu\"\nafter = \"1h\"\n\
                 data_dir = \"data\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
                 credentials_file = \"{}\"\n",
                server.endpoint(),
                credentials.display()
            ),
            ..options
        },
    )
}

/// The same cycle against a real S3-compatible server (every request signed and checked):
/// offloaded, restored, and a store that goes away or holds a corrupt chunk fails the wake
/// with 1053 and loses nothing.
#[test]
fn paused_data_goes_to_an_s3_server_and_comes_back() {
    let tmp = TempDir::new("relay-offload-s3");
    let data = tmp.path().join("data");
    let mut server = S3Server::start(&tmp.path().join("s3"), "perceptron");
    let objects = server.root.join("perceptron/objects/eu");
    let relay = s3_relay(&tmp, &server, SECRET_KEY);
    put_row(&relay, "kept in the bucket");

    wait_offloaded(&relay);
    assert!(!data.exists(), "the local copy is removed");
    let manifests = std::fs::read_dir(objects.join("instances/demo"))
        .unwrap()
        .count();
    assert_eq!(manifests, 1, "{}", relay.log());
    assert!(!chunk_files(&objects).is_empty());

    // Restored (the database lazily, read through the relay: a few pages here).
    assert_eq!(ok(&get_row(&relay)).trim(), "kept in the bucket");
    wait_storage(&relay, "local");
    assert!(data.join("db").is_dir());

    // The store down while offloaded: the wake fails with 1053, nothing starts; back up, the
    // next wake restores.
    wait_offloaded(&relay);
    server.stop();
    let out = get_row(&relay);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    assert!(
        relay.logged("cannot restore the offloaded data"),
        "{}",
        relay.log()
    );
    assert!(!data.exists());
    assert_eq!(storage(&relay), "offloaded");
    server.restart();
    assert_eq!(ok(&get_row(&relay)).trim(), "kept in the bucket");

    // The chunks corrupted in the bucket: 1053, and the log names the first one read.
    wait_offloaded(&relay);
    let names: Vec<String> = chunk_files(&objects)
        .iter()
        .map(|bad| {
            std::fs::write(bad, b"not what was offloaded").unwrap();
            bad.file_name().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    let out = get_row(&relay);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    assert!(
        relay
            .log()
            .lines()
            .any(|l| l.contains("cannot restore the offloaded data")
                && names.iter().any(|name| l.contains(name))),
        "{}",
        relay.log()
    );
    assert!(!data.exists());
}

/// A database restored lazily from S3: the compute, which holds no S3 credential, reads
/// what its queries need through the relay's socket while the rest is filled in. The store
/// down fails those reads (never the data); a relay killed -9 mid-fill and started again
/// serves them again.
#[test]
fn a_database_restored_lazily_from_s3_is_read_through_the_relay() {
    let tmp = TempDir::new("relay-offload-s3-lazy");
    let db = tmp.path().join("data/db/shop/data.sqlite");
    let socket = tmp.path().join("state/lazy/demo.sock");
    let mut server = S3Server::start(&tmp.path().join("s3"), "perceptron");
    let options = RelayOptions {
        command: Some(slow_fill_shim(&tmp, 2)),
        ..RelayOptions::default()
    };
    let mut relay = s3_relay_with(&tmp, &server, SECRET_KEY, options);
    create_big_table(&relay);
    let total = "3000\t24000000";
    assert_eq!(count_big(&relay), total);
    wait_offloaded(&relay);

    // The wake answers from a database that is still holes, through the socket.
    assert_eq!(ok(&big_row(&relay, 1500)).trim(), "00001500\t8000");
    assert_eq!(storage(&relay), "hydrating", "{}", relay.log());
    {
        use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
        let m = std::fs::metadata(&db).unwrap();
        assert!(m.blocks() * 512 < m.len(), "the file still has holes");
        let s = std::fs::metadata(&socket).unwrap();
        assert!(s.file_type().is_socket() && s.mode() & 0o777 == 0o600);
        let sidecar = std::fs::read_to_string(db.with_extension("sqlite.lazy")).unwrap();
        assert!(
            sidecar.contains(&format!("store unix:{}", socket.display())),
            "{sidecar}"
        );
    }
    let pid = relay.compute_pid().expect("a compute runs");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    for seen in [environ, cmdline] {
        let seen = String::from_utf8_lossy(&seen);
        assert!(
            !seen.contains(SECRET_KEY) && !seen.contains("AWS_SECRET_ACCESS_KEY"),
            "the compute is given no S3 credential: {seen}"
        );
    }

    // The store down: a read of a block not yet filled in fails, and the relay's log names
    // the object; back up, the same read answers.
    server.stop();
    let out = big_row(&relay, 2999);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("disk I/O error"), "{}", out.stderr);
    assert!(
        relay.logged("cannot read a range of the store for the compute"),
        "{}",
        relay.log()
    );
    server.restart();
    assert_eq!(ok(&big_row(&relay, 2999)).trim(), "00002999\t8000");

    // The relay killed -9 mid-fill: started again, it adopts the compute and serves the
    // socket again.
    relay.child.kill9();
    let relay = relay.restart();
    assert_eq!(ok(&big_row(&relay, 2000)).trim(), "00002000\t8000");
    // Filled in while queries keep the compute running: an ordinary file, the socket closed.
    assert!(
        Relay::wait_until(WITHIN, || {
            ok(&mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1"));
            storage(&relay) == "local"
        }),
        "storage {}:\n{}",
        storage(&relay),
        relay.log()
    );
    assert_eq!(count_big(&relay), total);
    assert!(
        Relay::wait_until(WITHIN, || !socket.exists()),
        "the socket is closed once nothing is left to fill in:\n{}",
        relay.log()
    );
}

/// A store that refuses the relay's signature: the offload fails, and the data stays local
/// and served.
#[test]
fn a_store_that_refuses_the_relays_key_leaves_the_data_local() {
    let tmp = TempDir::new("relay-offload-s3-key");
    let server = S3Server::start(&tmp.path().join("s3"), "perceptron");
    let relay = s3_relay(&tmp, &server, "not-the-secret");
    put_row(&relay, "never left");
    offload_now(&relay);
    assert!(
        Relay::wait_until(WITHIN, || relay
            .logged("offload failed; the data stays local")),
        "{}",
        relay.log()
    );
    assert_eq!(storage(&relay), "local");
    assert!(tmp.path().join("data/db").is_dir());
    assert_eq!(ok(&get_row(&relay)).trim(), "never left");
}

/// MariaDB under the process driver: its stopped data directory (InnoDB's files, the system
/// tables, the redo log) goes to the store whole and comes back whole before `mariadbd`
/// starts, committed rows and all.
#[test]
fn a_mariadb_data_directory_is_offloaded_and_restored_before_mariadbd_starts() {
    let tmp = TempDir::new("relay-offload-mariadb");
    let datadir = tmp.path().join("mariadb");
    let relay = tests::mariadb::switch_relay(
        tmp.path(),
        &[],
        RelayOptions {
            instance_toml: format!(
                "[instance.offload]\nstore = \"file://{}\"\nafter = \"1h\"\ndata_dir = \"mariadb\"\n",
                tmp.path().join("objects").display()
            ),
            ..RelayOptions::default()
        },
    );
    let sql = |sql: &str| mariadb(relay.port, "root", None, &["-N"], sql);
    ok(&sql(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, name VARCHAR(40)) \
         ENGINE=InnoDB; USE shop; INSERT INTO t SELECT seq, CONCAT('row ', seq) FROM seq_1_to_5000",
    ));
    wait_offloaded(&relay);
    assert!(!datadir.exists(), "the local copy is removed");
    assert!(relay.logged("offloaded: the data is in the store only"));

    // The wake restores every file (no lazy databases here) before mariadbd starts.
    assert_eq!(
        ok(&sql("SELECT COUNT(*), MAX(name) FROM shop.t")).trim(),
        "5000\trow 999",
        "{}",
        relay.log()
    );
    assert!(
        relay
            .log()
            .lines()
            .any(|l| l.contains("restored") && l.contains("lazy_files=0")),
        "{}",
        relay.log()
    );
    assert_eq!(storage(&relay), "local");
    ok(&sql(
        "INSERT INTO shop.t VALUES (5001, 'after the restore')",
    ));

    // Twice: the second offload sends only the chunks that changed (the system tables and
    // most of the redo log did not).
    wait_offloaded(&relay);
    let (first, second) = (uploaded(&relay, 1), uploaded(&relay, 2));
    assert!(second < first, "uploaded {first}, then {second}");
    assert_eq!(
        ok(&sql("SELECT name FROM shop.t WHERE id = 5001")).trim(),
        "after the restore"
    );
    let check = ok(&sql("CHECK TABLE shop.t")).to_owned();
    assert!(check.trim_end().ends_with("OK"), "{check}");
}

/// The exec driver's own `offload` and `restore` commands move the data (here: a move into a
/// "bucket" directory and back); the relay keeps the marker that makes every start restore
/// first, and a restore command that fails fails the wake with 1053.
#[test]
fn the_exec_drivers_commands_offload_and_restore_the_data() {
    let tmp = TempDir::new("relay-offload-exec");
    let d = tmp.path().display().to_string();
    let shim = tests::bin_path("server-shim").display().to_string();
    let scripts = [
        (
            "start.sh",
            format!(
                "set -e\nD={d}\nsetsid {shim} run --listen 127.0.0.1:$1 --data $D/data \
                 --key-file $D/perceptron.key >> $D/shim.log 2>&1 < /dev/null &\n\
                 echo $! > $D/shim.pid\n"
            ),
        ),
        (
            "stop.sh",
            format!(
                "D={d}\n[ -f $D/shim.pid ] || exit 0\npid=$(cat $D/shim.pid)\n\
                 kill $pid 2>/dev/null || true\n\
                 for i in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done\n\
                 rm -f $D/shim.pid\n"
            ),
        ),
        (
            "offload.sh",
            format!(
                "set -e\nD={d}\necho \"offload $PERCEPTRON_INSTANCE $PERCEPTRON_OFFLOAD_STORE\" \
                 >> $D/hooks.log\nmkdir -p $D/bucket\nmv $D/data $D/bucket/data\n"
            ),
        ),
        (
            "restore.sh",
            format!(
                "set -e\nD={d}\necho \"restore $PERCEPTRON_INSTANCE\" >> $D/hooks.log\n\
                 [ -f $D/restore-fails ] && exit 3\n\
                 if [ -d $D/bucket/data ]; then mv $D/bucket/data $D/data; fi\n"
            ),
        ),
    ];
    for (name, text) in &scripts {
        std::fs::write(tmp.path().join(name), text).unwrap();
    }
    let relay = Relay::start(
        tmp.path(),
        RelayOptions {
            instance_toml: "[instance.offload]\nafter = \"1h\"\nstore = \"s3://bucket/db\"\n"
                .into(),
            driver_toml: Some(
                "[instance.driver]\nkind = \"exec\"\n\
                 start = [\"sh\", \"{DIR}/start.sh\", \"{COMPUTE_PORT}\"]\n\
                 stop = [\"sh\", \"{DIR}/stop.sh\"]\n\
                 offload = [\"sh\", \"{DIR}/offload.sh\"]\n\
                 restore = [\"sh\", \"{DIR}/restore.sh\"]\n"
                    .into(),
            ),
            ..RelayOptions::default()
        },
    );
    let marker = tmp.path().join("state/offloaded/demo");
    let data = tmp.path().join("data");
    put_row(&relay, "moved by the commands");

    wait_offloaded(&relay);
    assert!(!data.exists() && tmp.path().join("bucket/data").is_dir());
    assert!(
        marker.exists(),
        "the marker says: restore before the next start"
    );
    let hooks = std::fs::read_to_string(tmp.path().join("hooks.log")).unwrap();
    assert_eq!(hooks, "offload demo s3://bucket/db\n");

    assert_eq!(ok(&get_row(&relay)).trim(), "moved by the commands");
    assert!(!marker.exists());
    assert_eq!(storage(&relay), "local");

    // A restore command that fails: 1053, nothing started, the marker kept; then it works.
    wait_offloaded(&relay);
    std::fs::write(tmp.path().join("restore-fails"), b"").unwrap();
    let out = get_row(&relay);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    assert!(
        relay.logged("restore command exited with exit status: 3"),
        "{}",
        relay.log()
    );
    assert!(marker.exists());
    assert_eq!(storage(&relay), "offloaded");
    std::fs::remove_file(tmp.path().join("restore-fails")).unwrap();
    assert_eq!(ok(&get_row(&relay)).trim(), "moved by the commands");

    drop(relay);
    // The compute is the script's child, not the test's: stopped by its recorded pid.
    if let Ok(pid) = std::fs::read_to_string(tmp.path().join("shim.pid")) {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(pid.trim())
            .status();
    }
}

/// A full disk on either side: the store's disk full during an offload keeps the local copy
/// (and the instance served); the data's disk full during a restore fails the wake with 1053
/// and keeps the store's copy; with room again, each goes through. Needs root (tmpfs mounts).
#[test]
fn a_full_disk_on_either_side_loses_nothing() {
    let tmp = TempDir::new("relay-offload-full");
    let Some(store_disk) = Tmpfs::mount(&tmp.path().join("objects"), "2m") else {
        return;
    };
    let Some(_data_disk) = Tmpfs::mount(&tmp.path().join("disk"), "16m") else {
        return;
    };
    let data = tmp.path().join("disk/data");
    tests::add_user(&data, USER, PASSWORD, true);
    let relay = Relay::start(
        tmp.path(),
        RelayOptions {
            command: Some(vec![
                tests::bin_path("server-shim").display().to_string(),
                "run".into(),
                "--listen".into(),
                "127.0.0.1:{COMPUTE_PORT}".into(),
                "--data".into(),
                data.display().to_string(),
                "--key-file".into(),
                tmp.path().join("perceptron.key").display().to_string(),
            ]),
            instance_toml: format!(
                "[instance.offload]\nstore = \"file://{}/objects/store\"\nafter = \"1h\"\n\
                 data_dir = \"disk/data\"\n",
                tmp.path().display()
            ),
            ..RelayOptions::default()
        },
    );
    put_row(&relay, "kept on a full disk");
    // 4 MiB that cannot fit in the 2 MiB store, written while a session holds the compute.
    let ballast: Vec<u8> = (0..4_u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let session = tests::raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    std::fs::write(data.join("ballast"), &ballast).unwrap();
    drop(session);

    // The store's disk is full: the offload fails, the local copy is still the data.
    offload_now(&relay);
    assert!(
        Relay::wait_until(WITHIN, || relay
            .logged("offload failed; the data stays local")),
        "{}",
        relay.log()
    );
    assert_eq!(storage(&relay), "local");
    assert_eq!(std::fs::read(data.join("ballast")).unwrap(), ballast);
    assert_eq!(ok(&get_row(&relay)).trim(), "kept on a full disk");

    // Room in the store: the next pause offloads.
    store_disk.remount("size=64m");
    wait_offloaded(&relay);
    assert!(!data.exists());

    // The data's disk is full: the restore fails the wake with 1053, and the store's copy is
    // still the data.
    let filler = tmp.path().join("disk/filler");
    std::fs::write(&filler, vec![1_u8; 14 << 20]).unwrap();
    let out = get_row(&relay);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    assert!(
        relay.logged("cannot restore the offloaded data"),
        "{}",
        relay.log()
    );
    assert!(
        !data.exists(),
        "never a partial directory in place of the data"
    );
    assert_eq!(storage(&relay), "offloaded");

    // Room again: the wake restores everything.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(ok(&get_row(&relay)).trim(), "kept on a full disk");
    assert_eq!(std::fs::read(data.join("ballast")).unwrap(), ballast);
    drop(relay);
}

/// `relay offload gc` beside a live relay: the manifest an update superseded and the chunks
/// only it named are deleted; the data the newest names still comes back.
#[test]
fn offload_gc_deletes_what_a_newer_offload_superseded() {
    let tmp = TempDir::new("relay-offload-gc");
    let store = tmp.path().join("objects");
    let relay = offloading_relay(&tmp, "1h");
    put_row(&relay, "first");
    wait_offloaded(&relay);
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "UPDATE shop.t SET name = 'second' WHERE id = 1",
    ));
    // The lazy restore pinned the manifest its database reads; the next offload unpins it.
    assert!(store.join("pins/demo").is_file());
    wait_storage(&relay, "local");
    wait_offloaded(&relay);
    assert!(!store.join("pins/demo").exists());
    let manifests = || {
        std::fs::read_dir(store.join("instances/demo"))
            .unwrap()
            .count()
    };
    assert_eq!(manifests(), 2);
    let gc = |extra: &[&str]| {
        let out = std::process::Command::new(tests::bin_path("relay"))
            .args(["offload", "gc", "--config"])
            .arg(tmp.path().join("relay.toml"))
            .args(["--keep", "0s"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dry = gc(&["--dry-run"]);
    assert!(dry.contains("would delete 1 manifest(s)"), "{dry}");
    assert_eq!(manifests(), 2);
    let chunks_before = chunk_files(&store).len();
    let done = gc(&[]);
    assert!(done.contains("deleted 1 manifest(s)"), "{done}");
    assert_eq!(manifests(), 1);
    assert!(chunk_files(&store).len() < chunks_before, "{done}");
    assert_eq!(ok(&get_row(&relay)).trim(), "second");
}

/// Waits for `storage` to be `want`, polling every few milliseconds (the step may be short).
fn wait_storage(relay: &Relay, want: &str) {
    assert!(
        Relay::wait_until(WITHIN, || storage(relay) == want),
        "storage {} (wanted {want}):\n{}",
        storage(relay),
        relay.log()
    );
}

/// `kill -9` of the relay in the middle of an offload, then of a restore: each time the data
/// survives, whole, and the next wake serves it.
#[test]
fn a_relay_killed_while_the_data_moves_loses_nothing() {
    let tmp = TempDir::new("relay-offload-kill");
    let data = tmp.path().join("data");
    // Enough bytes (50 chunks) that the data takes a while to move.
    let ballast: Vec<u8> = (0..200_u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut relay = offloading_relay(&tmp, "1h");
    put_row(&relay, "survives kill -9");
    // Written while a session is open: the compute exists, so nothing moves the directory.
    let session = tests::raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    std::fs::write(data.join("ballast"), &ballast).unwrap();
    drop(session);
    let query = |relay: &Relay| {
        assert_eq!(
            ok(&get_row(relay)).trim(),
            "survives kill -9",
            "{}",
            relay.log()
        );
    };

    // Killed while offloading: the local copy is still the data.
    offload_now(&relay);
    wait_storage(&relay, "offloading");
    relay.child.kill9();
    let mut relay = relay.restart();
    assert_eq!(storage(&relay), "local");
    assert_eq!(std::fs::read(data.join("ballast")).unwrap(), ballast);
    query(&relay);

    // Offloaded, then killed while restoring: the store is still the data.
    wait_offloaded(&relay);
    let waking = std::thread::spawn({
        let port = relay.port;
        move || mariadb(port, USER, Some(PASSWORD), &[], "SELECT 1")
    });
    wait_storage(&relay, "restoring");
    relay.child.kill9();
    let _ = waking.join();
    assert!(!data.exists(), "a half restore is not the data directory");
    let relay = relay.restart();
    assert_eq!(storage(&relay), "offloaded");
    query(&relay);
    assert_eq!(std::fs::read(data.join("ballast")).unwrap(), ballast);
    assert!(!tmp.path().join("data.restoring").exists());
}

/// `mariadb` reading its statements from stdin (more than one argument may hold).
fn mariadb_stdin(port: u16, sql: &str) -> tests::Output {
    let mut cmd = std::process::Command::new("mariadb");
    cmd.args(["-h127.0.0.1", "--skip-ssl", "-N", "-B"])
        .arg(tests::connect_timeout_arg(10))
        .arg(format!("-P{port}"))
        .arg(format!("-u{USER}"))
        .arg(format!("-p{PASSWORD}"));
    tests::run_with_input(&mut cmd, sql.as_bytes(), Duration::from_secs(120))
}

/// The number of chunks the `nth` offload (from 1) uploaded, from its log line, waiting for
/// it (the status says `offloaded` just before the line is written).
fn uploaded(relay: &Relay, nth: usize) -> usize {
    let line = |log: &str| {
        log.lines()
            .filter(|l| l.contains("offloaded: the data is in the store only"))
            .nth(nth - 1)
            .map(str::to_owned)
    };
    assert!(
        Relay::wait_until(WITHIN, || line(&relay.log()).is_some()),
        "no offload {nth}:\n{}",
        relay.log()
    );
    let line = line(&relay.log()).unwrap();
    let at = line.find("uploaded=").expect("uploaded=") + "uploaded=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The command of a server-shim on `<tmp>/data` that fills a lazily restored database in at
/// `mib_per_sec` (slow, so a test sees it still being filled in).
fn slow_fill_shim(tmp: &TempDir, mib_per_sec: u32) -> Vec<String> {
    vec![
        tests::bin_path("server-shim").display().to_string(),
        "run".into(),
        "--listen".into(),
        "127.0.0.1:{COMPUTE_PORT}".into(),
        "--data".into(),
        tmp.path().join("data").display().to_string(),
        "--key-file".into(),
        tmp.path().join("perceptron.key").display().to_string(),
        "--lazy-fill-mib-per-sec".into(),
        mib_per_sec.to_string(),
    ]
}

/// `shop.big`: 3,000 rows of 8,000 bytes (24 MB, six chunks), through the relay.
fn create_big_table(relay: &Relay) {
    let mut sql =
        String::from("CREATE DATABASE shop; CREATE TABLE shop.big (id INT PRIMARY KEY, v TEXT);\n");
    for batch in 0..30 {
        let rows: Vec<String> = (0..100)
            .map(|i| {
                let id = batch * 100 + i;
                format!("({id}, '{id:08}{}')", "x".repeat(7992))
            })
            .collect();
        sql.push_str(&format!(
            "INSERT INTO shop.big VALUES {};\n",
            rows.join(",")
        ));
    }
    ok(&mariadb_stdin(relay.port, &sql));
}

/// `shop.big`'s row count and bytes, as `rows\tbytes`.
fn count_big(relay: &Relay) -> String {
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "SELECT COUNT(*), SUM(LENGTH(v)) FROM shop.big",
    ))
    .trim()
    .to_owned()
}

/// One row of `shop.big`: its first 8 characters and its length.
fn big_row(relay: &Relay, id: u32) -> tests::Output {
    mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        &format!("SELECT LEFT(v, 8), LENGTH(v) FROM shop.big WHERE id = {id}"),
    )
}

/// server-shim's databases are restored lazily (the default): the compute starts with the
/// database still in the store, reads what queries need, and fills the rest in behind; paused
/// again before that finishes, the offload sends only what changed.
#[test]
fn a_lazily_restored_database_answers_at_once_and_is_filled_in_behind() {
    let tmp = TempDir::new("relay-offload-lazy");
    let data = tmp.path().join("data");
    let db = data.join("db/shop/data.sqlite");
    let sidecar = data.join("db/shop/data.sqlite.lazy");
    let relay = Relay::start(
        tmp.path(),
        RelayOptions {
            instance_toml: format!(
                "[instance.offload]\nstore = \"file://{}\"\nafter = \"1h\"\ndata_dir = \"data\"\n",
                tmp.path().join("objects").display()
            ),
            // Slow, so the fill is still running when the instance pauses again.
            command: Some(slow_fill_shim(&tmp, 2)),
            ..RelayOptions::default()
        },
    );
    create_big_table(&relay);
    let total = "3000\t24000000";
    assert_eq!(count_big(&relay), total);
    wait_offloaded(&relay);

    // The wake answers from a database that is still holes on the local disk.
    assert_eq!(ok(&big_row(&relay, 1500)).trim(), "00001500\t8000");
    assert_eq!(storage(&relay), "hydrating", "{}", relay.log());
    assert!(sidecar.exists());
    {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(&db).unwrap();
        assert!(m.blocks() * 512 < m.len(), "the file still has holes");
    }
    assert_eq!(
        relay.metric("relay_instance_data{instance=\"demo\",place=\"hydrating\"}"),
        1.0
    );
    ok(&mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "UPDATE shop.big SET v = 'short' WHERE id = 2000",
    ));
    let changed = "3000\t23992005";

    // Paused and offloaded again mid-fill: the chunks still in the store are not sent again.
    wait_offloaded(&relay);
    // The changed chunk, the one with the database header, and the block list (always put).
    let sent = uploaded(&relay, 2);
    assert!(sent <= 3, "uploaded {sent} chunks:\n{}", relay.log());
    // Woken again, and the compute killed (-9) while it fills the database in: what it had
    // fetched but not marked is fetched again, nothing is lost.
    let short = mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "SELECT v FROM shop.big WHERE id = 2000",
    );
    assert_eq!(ok(&short).trim(), "short");
    assert_eq!(storage(&relay), "hydrating", "{}", relay.log());
    let pid = relay.compute_pid().expect("a compute runs");
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    assert!(
        Relay::wait_until(WITHIN, || !tests::relay::pid_alive(pid)),
        "the compute is gone"
    );
    assert_eq!(count_big(&relay), changed);
    // Filled in while queries keep the compute running (an idle one would be paused, and
    // its fill with it): an ordinary file, the data local.
    // Local once the fill is done and its sidecars are gone (the storage says local a moment
    // before the last sidecar is removed).
    let have = data.join("db/shop/data.sqlite.lazy-have");
    assert!(
        Relay::wait_until(WITHIN, || {
            ok(&mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1"));
            storage(&relay) == "local" && !sidecar.exists() && !have.exists()
        }),
        "storage {}, sidecar {}, have {}:\n{}",
        storage(&relay),
        sidecar.exists(),
        have.exists(),
        relay.log()
    );
    assert_eq!(count_big(&relay), changed);
}
