//! A SQLite database restored lazily, through the VFS, as server-shim opens it.

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lazy_vfs::sidecar::{self, Sidecar};
use rusqlite::Connection;

/// Chunks and blocks that are not multiples of a page: reads straddle their boundaries.
const CHUNK: u64 = 3 * BLOCK;
const BLOCK: u64 = 3072;

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lazy-vfs-sqlite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Moves `file` to the store in chunks (and its block list) and leaves it lazily restored: a
/// hole of its size.
fn offload_and_restore_lazily(file: &Path, store: &Path) -> Sidecar {
    let put = |bytes: &[u8]| {
        let id = sidecar::chunk_id(bytes);
        let at = sidecar::chunk_file(store, &id);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, bytes).unwrap();
        id
    };
    let data = std::fs::read(file).unwrap();
    let chunks = data.chunks(CHUNK as usize).map(put).collect();
    let mut list = Vec::new();
    sidecar::push_block_hashes(&mut list, &data, BLOCK as usize);
    let s = Sidecar {
        store: sidecar::Source::Directory(store.to_path_buf()),
        size: data.len() as u64,
        chunk_bytes: CHUNK,
        block_bytes: BLOCK,
        blocks: put(&list),
        chunks,
    };
    std::fs::remove_file(file).unwrap();
    std::fs::File::create(file)
        .unwrap()
        .set_len(s.size)
        .unwrap();
    std::fs::write(sidecar::have_path(file), vec![0u8; s.block_count()]).unwrap();
    std::fs::write(sidecar::chunks_path(file), s.encode()).unwrap();
    s
}

fn build(file: &Path) -> Vec<(i64, String)> {
    let c = Connection::open(file).unwrap();
    c.pragma_update(None, "journal_mode", "wal").unwrap();
    c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); CREATE INDEX tv ON t (v);")
        .unwrap();
    let tx = c.unchecked_transaction().unwrap();
    for i in 0..3000i64 {
        tx.execute(
            "INSERT INTO t VALUES (?1, ?2)",
            (i, format!("row {i} {}", "x".repeat((i % 200) as usize))),
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let rows = all(&c);
    // A clean close checkpoints the WAL into the file and removes it.
    drop(c);
    rows
}

fn all(c: &Connection) -> Vec<(i64, String)> {
    let mut st = c.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn wait_whole(file: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while sidecar::chunks_path(file).exists() {
        assert!(
            Instant::now() < deadline,
            "the background fill did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_lazily_restored_database_reads_writes_shrinks_and_becomes_ordinary() {
    // Slow enough that the first queries run on a file still mostly holes.
    lazy_vfs::register(2 << 20).unwrap();
    let dir = tempdir("db");
    let store = dir.join("store");
    let file = dir.join("data.sqlite");
    let rows = build(&file);
    let s = offload_and_restore_lazily(&file, &store);
    assert!(s.chunks.len() > 20, "{} chunks", s.chunks.len());

    let c = Connection::open(&file).unwrap();
    // A point read by index fetches a few chunks, not the file.
    let v: String = c
        .query_row("SELECT v FROM t WHERE id = 1234", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, rows[1234].1);
    let have = std::fs::read(sidecar::have_path(&file)).unwrap();
    assert!(have.iter().all(|&h| h == 0), "a read marks nothing on disk");
    assert_eq!(all(&c), rows);

    // Writes, a second connection, a checkpoint into the lazy file, and a shrink.
    let c2 = Connection::open(&file).unwrap();
    c2.execute("UPDATE t SET v = 'changed' WHERE id < 100", [])
        .unwrap();
    c.execute("DELETE FROM t WHERE id >= 1500", []).unwrap();
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM;")
        .unwrap();
    let mut expected: Vec<(i64, String)> = rows
        .iter()
        .filter(|(id, _)| *id < 1500)
        .map(|(id, v)| {
            (
                *id,
                if *id < 100 {
                    "changed".into()
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    assert_eq!(all(&c2), expected);
    // It grows again after the shrink: never stale chunks under the new rows.
    c.execute("INSERT INTO t VALUES (5000, 'after the shrink')", [])
        .unwrap();
    expected.push((5000, "after the shrink".into()));

    wait_whole(&file);
    assert!(!sidecar::have_path(&file).exists());
    drop((c, c2));
    let c = Connection::open(&file).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    assert_eq!(all(&c), expected);
    drop(c);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_chunk_fails_the_query_and_the_data_is_still_there_once_it_is_back() {
    lazy_vfs::register(2 << 20).unwrap();
    let dir = tempdir("missing");
    let store = dir.join("store");
    let file = dir.join("data.sqlite");
    let rows = build(&file);
    let s = offload_and_restore_lazily(&file, &store);
    // Hide every chunk (not the block list): the first page cannot be read.
    let hide = |to_aside: bool| {
        for id in &s.chunks {
            let at = sidecar::chunk_file(&store, id);
            let away = at.with_extension("aside");
            let _ = if to_aside {
                std::fs::rename(&at, &away)
            } else {
                std::fs::rename(&away, &at)
            };
        }
    };
    hide(true);
    let err = Connection::open(&file)
        .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)))
        .unwrap_err();
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::SystemIoFailure),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        vec![0; s.size as usize],
        "nothing written"
    );
    hide(false);
    let c = Connection::open(&file).unwrap();
    assert_eq!(all(&c), rows);
    drop(c);
    assert_eq!(s.size, std::fs::metadata(&file).unwrap().len());
    wait_whole(&file);
    std::fs::remove_dir_all(dir).unwrap();
}
