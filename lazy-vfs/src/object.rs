//! Reading a range of a store object from where a sidecar says it is: a file of a local
//! directory store, or the relay's socket ([`crate::range`]).

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::FileExt as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::range::{self, Head, Request};
use crate::sidecar::{self, Source};

/// How long the relay may take to answer one request: its own store deadlines (30 s for an
/// answer, retries within 20 s) and some slack. A relay that does not answer fails the read
/// (SQLite's I/O error) rather than holding it for ever.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(90);

/// An object that could not be read: its name (as the store or socket knows it), and why.
#[derive(Debug)]
pub struct ObjectError {
    /// The object, as a log line should name it.
    pub object: String,
    /// Why.
    pub error: std::io::Error,
}

/// How logs name object `id` of `source`.
#[must_use]
pub fn name(source: &Source, id: &str) -> String {
    match source {
        Source::Directory(dir) => sidecar::chunk_file(dir, id).display().to_string(),
        Source::Socket(socket) => format!(
            "chunks/{}/{id} (through the relay's socket {})",
            id.get(..2).unwrap_or("00"),
            socket.display()
        ),
    }
}

/// Reads `len` bytes at `offset` of object `id`; fewer bytes there is an error.
///
/// # Errors
/// [`ObjectError`] naming the object.
pub fn read(source: &Source, id: &str, offset: u64, len: usize) -> Result<Vec<u8>, ObjectError> {
    let result = match source {
        Source::Directory(dir) => read_file(&sidecar::chunk_file(dir, id), offset, len),
        Source::Socket(socket) => read_socket(socket, id, offset, len),
    };
    result.map_err(|error| ObjectError {
        object: name(source, id),
        error,
    })
}

fn read_file(path: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; len];
    File::open(path)?.read_exact_at(&mut bytes, offset)?;
    Ok(bytes)
}

/// One connection for the whole read, in requests of at most [`range::MAX_LEN`].
fn read_socket(socket: &Path, id: &str, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(SOCKET_TIMEOUT))?;
    stream.set_write_timeout(Some(SOCKET_TIMEOUT))?;
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        let piece = u32::try_from(len - bytes.len())
            .unwrap_or(u32::MAX)
            .min(range::MAX_LEN);
        let request = Request {
            id: id.to_owned(),
            offset: offset.saturating_add(bytes.len() as u64),
            len: piece,
        };
        stream.write_all(&request.encode().map_err(std::io::Error::other)?)?;
        let mut head = [0u8; range::HEAD_LEN];
        stream.read_exact(&mut head)?;
        match Head::decode(head, &request).map_err(std::io::Error::other)? {
            Head::Bytes(n) => {
                let at = bytes.len();
                bytes.resize(at + n as usize, 0);
                stream.read_exact(bytes.get_mut(at..).unwrap_or_default())?;
            }
            Head::Refused(n) => {
                let mut text = vec![0u8; n as usize];
                stream.read_exact(&mut text)?;
                return Err(std::io::Error::other(format!(
                    "the relay: {}",
                    String::from_utf8_lossy(&text)
                )));
            }
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A relay stand-in answering each request with `answer(request)`, on one connection.
    fn serve(
        socket: &Path,
        answer: impl Fn(&Request) -> Vec<u8> + Send + 'static,
    ) -> std::thread::JoinHandle<Vec<Request>> {
        let listener = UnixListener::bind(socket).unwrap();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; range::REQUEST_LEN];
            while conn.read_exact(&mut buf).is_ok() {
                let r = Request::decode(&buf).unwrap();
                conn.write_all(&answer(&r)).unwrap();
                seen.push(r);
            }
            seen
        })
    }

    fn socket(name: &str) -> std::path::PathBuf {
        let p =
            std::env::temp_dir().join(format!("lazy-object-{name}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    const ID: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_long_read_through_the_socket_is_split_into_requests() {
        let path = socket("split");
        let server = serve(&path, |r| {
            let mut out = Head::Bytes(r.len).encode().to_vec();
            out.extend((0..r.len as u64).map(|i| ((r.offset + i) % 251) as u8));
            out
        });
        let len = range::MAX_LEN as usize + 10;
        let bytes = read(&Source::Socket(path.clone()), ID, 7, len).unwrap();
        assert_eq!(bytes.len(), len);
        assert!(
            bytes
                .iter()
                .enumerate()
                .all(|(i, b)| *b == ((7 + i as u64) % 251) as u8)
        );
        let seen = server.join().unwrap();
        assert_eq!(
            seen.iter().map(|r| (r.offset, r.len)).collect::<Vec<_>>(),
            [(7, range::MAX_LEN), (7 + u64::from(range::MAX_LEN), 10)]
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_refusal_or_no_relay_is_an_error_naming_the_object() {
        let path = socket("refused");
        let server = serve(&path, |_| {
            let text = b"chunks/9f/9f86: the store timed out";
            let mut out = Head::Refused(text.len() as u32).encode().to_vec();
            out.extend_from_slice(text);
            out
        });
        let source = Source::Socket(path.clone());
        let err = read(&source, ID, 0, 16).unwrap_err();
        assert!(
            err.object.starts_with("chunks/9f/9f86d081"),
            "{}",
            err.object
        );
        assert!(
            err.error.to_string().contains("the store timed out"),
            "{}",
            err.error
        );
        server.join().unwrap();
        std::fs::remove_file(&path).unwrap();
        let err = read(&source, ID, 0, 16).unwrap_err();
        assert_eq!(err.error.kind(), std::io::ErrorKind::NotFound);
    }
}
