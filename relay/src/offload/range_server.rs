//! The relay's side of the range protocol (`lazy_vfs::range`): a unix socket per instance
//! that reads ranges of store objects for its compute, while a database restored lazily from
//! a store the compute cannot read (S3: the credentials stay in the relay) is filled in
//! (docs/offload.md, "Lazy restore from S3").
//!
//! What it serves is narrow: only the objects the sidecars in the instance's data directory
//! name, only to whoever may open the socket (mode 0600, in a directory of mode 0700, owned
//! by the relay's user, as the compute is). The compute checks every block it receives
//! against the block list, so a fault here can fail a read, never change the data.
//!
//! The server ends itself, and removes its socket, once no sidecar is left (every database
//! filled in, or the data offloaded again); [`RangeServer::ensure`] starts it again after the
//! next lazy restore.

use std::collections::HashSet;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lazy_vfs::range::{self, Head, Request};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

use super::{archive, manifest};

/// How often the server looks whether any sidecar is left.
const CHECK_EVERY: Duration = Duration::from_secs(10);

/// A connection with no request for this long is closed (the compute opens one per read).
const IDLE: Duration = Duration::from_secs(60);

/// Connections served at once; more wait to be accepted.
const CONNECTIONS: usize = 64;

/// The longest path a unix socket may have (`sun_path`, with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The socket of one instance, started when needed.
pub struct RangeServer {
    instance: String,
    socket: PathBuf,
    /// The data directory whose sidecars say what may be read.
    dir: PathBuf,
    store: Arc<dyn ObjectStore>,
    /// Whether a server runs: set and cleared under this lock, so one that ends (no sidecar
    /// left) and a restore that needs one (sidecars just written) cannot miss each other.
    running: Arc<Mutex<bool>>,
    /// [`CHECK_EVERY`], shorter in tests.
    check_every: Duration,
}

/// Why the server's socket cannot be used.
#[derive(Debug)]
pub enum SocketError {
    /// Its path is longer than a unix socket's may be.
    TooLong(PathBuf),
    /// It cannot be created.
    Bind(PathBuf, std::io::Error),
}

impl std::fmt::Display for SocketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLong(path) => write!(
                f,
                "{}: longer than a unix socket's path may be ({MAX_SOCKET_PATH} bytes); use a \
                 shorter state_dir",
                path.display()
            ),
            Self::Bind(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

impl std::error::Error for SocketError {}

impl RangeServer {
    /// The server for `instance`'s data directory `dir`, on `socket`; nothing runs yet.
    ///
    /// # Errors
    /// [`SocketError::TooLong`]: the socket's path is too long for a unix socket.
    pub fn new(
        instance: &str,
        socket: PathBuf,
        dir: PathBuf,
        store: Arc<dyn ObjectStore>,
    ) -> Result<Self, SocketError> {
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(SocketError::TooLong(socket));
        }
        Ok(Self {
            instance: instance.to_owned(),
            socket,
            dir,
            store,
            running: Arc::new(Mutex::new(false)),
            check_every: CHECK_EVERY,
        })
    }

    /// Starts serving unless a server runs already, or no sidecar needs one.
    ///
    /// # Errors
    /// [`SocketError::Bind`]: the socket cannot be created.
    pub fn ensure(&self) -> Result<(), SocketError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if *running || archive::lazy_sidecars(&self.dir).is_empty() {
            return Ok(());
        }
        let listener = bind(&self.socket).map_err(|e| SocketError::Bind(self.socket.clone(), e))?;
        *running = true;
        let served = Served {
            instance: self.instance.clone(),
            dir: self.dir.clone(),
            store: Arc::clone(&self.store),
            allowed: Mutex::new(HashSet::new()),
        };
        tokio::spawn(serve(
            listener,
            Arc::new(served),
            self.socket.clone(),
            Arc::clone(&self.running),
            self.check_every,
        ));
        tracing::info!(instance = %self.instance, socket = %self.socket.display(), "serving the store's objects to the compute while its databases are filled in");
        Ok(())
    }
}

/// Creates `socket` (a stale one from an earlier relay is replaced) in a private directory,
/// readable by the relay's user only.
fn bind(socket: &Path) -> std::io::Result<UnixListener> {
    if let Some(parent) = socket.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// What every connection of one server shares.
struct Served {
    instance: String,
    dir: PathBuf,
    store: Arc<dyn ObjectStore>,
    /// The objects the sidecars named when last read.
    allowed: Mutex<HashSet<String>>,
}

impl Served {
    /// Whether the sidecars name object `id` (read again when it is not known yet).
    async fn allows(&self, id: &str) -> bool {
        if self.lock().contains(id) {
            return true;
        }
        let dir = self.dir.clone();
        let named = tokio::task::spawn_blocking(move || named_objects(&dir))
            .await
            .unwrap_or_default();
        let mut allowed = self.lock();
        *allowed = named;
        allowed.contains(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.allowed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every object the sidecars under `dir` name: chunks and block lists.
fn named_objects(dir: &Path) -> HashSet<String> {
    let mut named = HashSet::new();
    for path in archive::lazy_sidecars(dir) {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if let Ok(s) = lazy_vfs::sidecar::Sidecar::decode(&bytes) {
            named.insert(s.blocks);
            named.extend(s.chunks);
        }
    }
    named
}

async fn serve(
    listener: UnixListener,
    served: Arc<Served>,
    socket: PathBuf,
    running: Arc<Mutex<bool>>,
    check_every: Duration,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    let mut check = tokio::time::interval(check_every);
    check.tick().await;
    loop {
        tokio::select! {
            _ = check.tick() => {
                let mut running = running.lock().unwrap_or_else(PoisonError::into_inner);
                if archive::lazy_sidecars(&served.dir).is_empty() {
                    *running = false;
                    let _ = std::fs::remove_file(&socket);
                    tracing::info!(instance = %served.instance, "every database is filled in; the store's socket is closed");
                    return;
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    let served = Arc::clone(&served);
                    let permits = Arc::clone(&permits);
                    tokio::spawn(async move {
                        let Ok(_permit) = permits.acquire_owned().await else { return };
                        answer(conn, &served).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(instance = %served.instance, error = %e, "cannot accept on the store's socket");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Answers one connection's requests until it closes, goes idle, or sends what is not a
/// request (answered with a refusal, then closed).
async fn answer(mut conn: UnixStream, served: &Served) {
    let mut buf = [0u8; range::REQUEST_LEN];
    loop {
        match tokio::time::timeout(IDLE, conn.read_exact(&mut buf)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let request = match Request::decode(&buf) {
            Ok(r) => r,
            Err(e) => {
                let _ = refuse(&mut conn, &e.to_string()).await;
                return;
            }
        };
        let key = manifest::chunk_key(&request.id);
        if !served.allows(&request.id).await {
            tracing::warn!(instance = %served.instance, object = %key, "the compute asked for an object its sidecars do not name; refused");
            if refuse(
                &mut conn,
                &format!("{key}: not an object of this instance's databases"),
            )
            .await
            .is_err()
            {
                return;
            }
            continue;
        }
        let end = request.offset + u64::from(request.len);
        let started = std::time::Instant::now();
        let got = served
            .store
            .get_range(&Key::from(key.as_str()), request.offset..end)
            .await;
        tracing::debug!(instance = %served.instance, object = %key, offset = request.offset, len = request.len, us = started.elapsed().as_micros() as u64, "read a range of the store for the compute");
        let written = match got {
            Ok(bytes) if bytes.len() == request.len as usize => {
                let head = Head::Bytes(request.len).encode();
                match conn.write_all(&head).await {
                    Ok(()) => conn.write_all(&bytes).await,
                    Err(e) => Err(e),
                }
            }
            Ok(bytes) => {
                let why = format!(
                    "{key}: {} bytes at {}, {} asked",
                    bytes.len(),
                    request.offset,
                    request.len
                );
                tracing::warn!(instance = %served.instance, object = %key, error = %why, "a range the store does not have");
                refuse(&mut conn, &why).await
            }
            Err(e) => {
                tracing::warn!(instance = %served.instance, object = %key, error = %e, "cannot read a range of the store for the compute");
                refuse(&mut conn, &format!("{key}: {e}")).await
            }
        };
        if written.is_err() {
            return;
        }
    }
}

async fn refuse(conn: &mut UnixStream, why: &str) -> std::io::Result<()> {
    let text = range::refusal(why);
    let len = u32::try_from(text.len()).unwrap_or(range::MAX_MESSAGE);
    conn.write_all(&Head::Refused(len).encode()).await?;
    conn.write_all(text.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::PutPayload;

    struct Setup {
        root: PathBuf,
        server: RangeServer,
        id: String,
    }

    /// A directory store holding one chunk, and a data directory whose sidecar names it.
    async fn setup(name: &str) -> Setup {
        let root = std::env::temp_dir().join(format!("range-server-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (objects, data) = (root.join("objects"), root.join("data/db/shop"));
        std::fs::create_dir_all(&objects).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&objects).unwrap());
        let chunk: Vec<u8> = (0..100u8).collect();
        let id = manifest::chunk_id(&chunk);
        store
            .put(
                &Key::from(manifest::chunk_key(&id).as_str()),
                PutPayload::from(chunk),
            )
            .await
            .unwrap();
        let socket = root.join("lazy/shop.sock");
        let sidecar = lazy_vfs::sidecar::Sidecar {
            store: lazy_vfs::sidecar::Source::Socket(socket.clone()),
            size: 100,
            chunk_bytes: 4 << 20,
            block_bytes: 16 << 10,
            blocks: manifest::chunk_id(b"list"),
            chunks: vec![id.clone()],
        };
        let file = data.join("data.sqlite");
        std::fs::write(lazy_vfs::sidecar::chunks_path(&file), sidecar.encode()).unwrap();
        let server = RangeServer::new("shop", socket, root.join("data"), store).unwrap();
        Setup { root, server, id }
    }

    async fn read(socket: &Path, id: &str, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let (source, id) = (
            lazy_vfs::sidecar::Source::Socket(socket.to_path_buf()),
            id.to_owned(),
        );
        tokio::task::spawn_blocking(move || lazy_vfs::object::read(&source, &id, offset, len))
            .await
            .unwrap()
            .map_err(|e| format!("{}: {}", e.object, e.error))
    }

    #[tokio::test]
    async fn the_socket_serves_ranges_of_the_objects_the_sidecars_name_only() {
        let s = setup("serve").await;
        s.server.ensure().unwrap();
        let mode = std::fs::metadata(&s.server.socket)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            read(&s.server.socket, &s.id, 10, 5).await.unwrap(),
            [10, 11, 12, 13, 14]
        );
        // Past the object's end: refused, naming it.
        let err = read(&s.server.socket, &s.id, 98, 5).await.unwrap_err();
        assert!(err.contains(&manifest::chunk_key(&s.id)), "{err}");
        // An object in the store that no sidecar names.
        let other = manifest::chunk_id(b"another instance's chunk");
        let err = read(&s.server.socket, &other, 0, 1).await.unwrap_err();
        assert!(err.contains("not an object of this instance"), "{err}");
        // Garbage is answered with a refusal, then the connection is closed.
        let mut conn = UnixStream::connect(&s.server.socket).await.unwrap();
        conn.write_all(&[b'x'; range::REQUEST_LEN]).await.unwrap();
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer.first(), Some(&1), "{answer:?}");
        assert!(String::from_utf8_lossy(&answer).contains("magic"));
        std::fs::remove_dir_all(s.root).unwrap();
    }

    #[tokio::test]
    async fn the_server_ends_when_no_sidecar_is_left_and_starts_again_when_needed() {
        let mut s = setup("ends").await;
        s.server.check_every = Duration::from_millis(20);
        let sidecar = s.root.join("data/db/shop/data.sqlite.lazy");
        let kept = std::fs::read(&sidecar).unwrap();
        std::fs::remove_file(&sidecar).unwrap();
        s.server.ensure().unwrap();
        assert!(!s.server.socket.exists(), "nothing to serve: not started");
        std::fs::write(&sidecar, &kept).unwrap();
        s.server.ensure().unwrap();
        assert!(read(&s.server.socket, &s.id, 0, 1).await.is_ok());
        std::fs::remove_file(&sidecar).unwrap();
        while s.server.socket.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!*s.server.running.lock().unwrap());
        std::fs::write(&sidecar, &kept).unwrap();
        s.server.ensure().unwrap();
        assert!(read(&s.server.socket, &s.id, 0, 1).await.is_ok());
        std::fs::remove_dir_all(s.root).unwrap();
    }
}
