//! The range protocol: a compute asks the relay's unix socket for a range of a store object,
//! for a lazily restored file whose store the compute cannot read itself (docs/offload.md,
//! "Lazy restore from S3"). Pure: bytes in, values out.
//!
//! One request, one answer, in order, on a connection either side may close between them:
//!
//! ```text
//! request  "PLR1" | id: 64 lower-case hex (a chunk's SHA-256) | offset: u64 BE | len: u32 BE
//! answer   status: u8 | n: u32 BE | n bytes
//!          status 0: the range's bytes, n = len exactly
//!          status 1: why not, n ≤ 1024 bytes of UTF-8 text
//! ```
//!
//! The relay answers only for the objects its instance's sidecars name; the compute checks
//! every block it gets against the block list, so the relay is trusted for availability, not
//! for the bytes.

/// The first bytes of every request.
pub const MAGIC: &[u8; 4] = b"PLR1";

/// A request's length.
pub const REQUEST_LEN: usize = 4 + 64 + 8 + 4;

/// An answer's head: status and length.
pub const HEAD_LEN: usize = 5;

/// The most bytes one request may ask for (a chunk is 4 MiB).
pub const MAX_LEN: u32 = 16 << 20;

/// The longest refusal text.
pub const MAX_MESSAGE: u32 = 1024;

/// A range of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The object's id: a chunk's, or a block list's.
    pub id: String,
    /// Where the range starts in the object.
    pub offset: u64,
    /// How many bytes (1 ..= [`MAX_LEN`]).
    pub len: u32,
}

/// What an answer's head says follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// The range's bytes, this many.
    Bytes(u32),
    /// A refusal's text, this many bytes.
    Refused(u32),
}

/// Bytes that are not a request or an answer's head of this protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeError(pub &'static str);

impl std::fmt::Display for RangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "range protocol: {}", self.0)
    }
}

impl std::error::Error for RangeError {}

fn is_id(id: &[u8]) -> bool {
    id.len() == 64 && id.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Request {
    /// The request's bytes.
    ///
    /// # Errors
    /// [`RangeError`] for an id that is not a SHA-256 in hex, or a length out of range: such a
    /// request would be refused anyway.
    pub fn encode(&self) -> Result<[u8; REQUEST_LEN], RangeError> {
        if !is_id(self.id.as_bytes()) {
            return Err(RangeError("the id is not a SHA-256 in lower-case hex"));
        }
        if self.len == 0 || self.len > MAX_LEN {
            return Err(RangeError("the length is out of range"));
        }
        let mut out = [0u8; REQUEST_LEN];
        let (magic, rest) = out.split_at_mut(4);
        magic.copy_from_slice(MAGIC);
        let (id, rest) = rest.split_at_mut(64);
        id.copy_from_slice(self.id.as_bytes());
        let (offset, len) = rest.split_at_mut(8);
        offset.copy_from_slice(&self.offset.to_be_bytes());
        len.copy_from_slice(&self.len.to_be_bytes());
        Ok(out)
    }

    /// Reads a request.
    ///
    /// # Errors
    /// [`RangeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, RangeError> {
        if bytes.len() != REQUEST_LEN {
            return Err(RangeError("a request is 80 bytes"));
        }
        let (magic, rest) = bytes.split_at(4);
        if magic != MAGIC {
            return Err(RangeError("not a range request (magic)"));
        }
        let (id, rest) = rest.split_at(64);
        if !is_id(id) {
            return Err(RangeError("the id is not a SHA-256 in lower-case hex"));
        }
        let (offset, len) = rest.split_at(8);
        let offset = u64::from_be_bytes(offset.try_into().map_err(|_| RangeError("offset"))?);
        let len = u32::from_be_bytes(len.try_into().map_err(|_| RangeError("length"))?);
        if len == 0 || len > MAX_LEN {
            return Err(RangeError("the length is out of range"));
        }
        if offset.checked_add(u64::from(len)).is_none() {
            return Err(RangeError("the range ends beyond 2^64"));
        }
        Ok(Self {
            id: String::from_utf8_lossy(id).into_owned(),
            offset,
            len,
        })
    }
}

impl Head {
    /// The head's bytes.
    #[must_use]
    pub fn encode(self) -> [u8; HEAD_LEN] {
        let (status, n) = match self {
            Self::Bytes(n) => (0u8, n),
            Self::Refused(n) => (1u8, n),
        };
        let mut out = [status; HEAD_LEN];
        if let Some(len) = out.get_mut(1..) {
            len.copy_from_slice(&n.to_be_bytes());
        }
        out
    }

    /// Reads the head of the answer to `asked`.
    ///
    /// # Errors
    /// [`RangeError`] for an unknown status, a byte count other than the one asked for, or a
    /// refusal too long.
    pub fn decode(bytes: [u8; HEAD_LEN], asked: &Request) -> Result<Self, RangeError> {
        let [status, a, b, c, d] = bytes;
        let n = u32::from_be_bytes([a, b, c, d]);
        match status {
            0 if n == asked.len => Ok(Self::Bytes(n)),
            0 => Err(RangeError("an answer of another length than asked")),
            1 if n <= MAX_MESSAGE => Ok(Self::Refused(n)),
            1 => Err(RangeError("a refusal too long")),
            _ => Err(RangeError("an unknown status")),
        }
    }
}

/// A refusal's text, cut to [`MAX_MESSAGE`] bytes on a character boundary.
#[must_use]
pub fn refusal(text: &str) -> &str {
    let mut end = text.len().min(MAX_MESSAGE as usize);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_request_is_its_fixed_bytes() {
        let r = Request {
            id: ID.to_owned(),
            offset: 0x0102_0304_0506_0708,
            len: 16384,
        };
        let bytes = r.encode().unwrap();
        let mut expected = b"PLR1".to_vec();
        expected.extend_from_slice(ID.as_bytes());
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x40, 0]);
        assert_eq!(bytes.as_slice(), expected.as_slice());
        assert_eq!(Request::decode(&bytes).unwrap(), r);
    }

    #[test]
    fn bad_requests_are_refused_by_what_is_wrong() {
        let good = Request {
            id: ID.to_owned(),
            offset: 0,
            len: 1,
        }
        .encode()
        .unwrap();
        let with = |at: usize, b: &[u8]| {
            let mut r = good;
            r[at..at + b.len()].copy_from_slice(b);
            Request::decode(&r).unwrap_err().0
        };
        assert!(with(0, b"GET ").contains("magic"));
        assert!(with(4, b"G").contains("hex"));
        assert!(with(4, b"A").contains("hex"));
        assert!(with(76, &[0, 0, 0, 0]).contains("length"));
        assert!(with(76, &(MAX_LEN + 1).to_be_bytes()).contains("length"));
        assert!(with(68, &[0xff; 8]).contains("2^64"));
        assert!(Request::decode(&good[..79]).is_err());
        assert!(Request::decode(&[]).is_err());
        let bad_id = Request {
            id: "../../etc/passwd".to_owned(),
            offset: 0,
            len: 1,
        };
        assert!(bad_id.encode().is_err());
    }

    #[test]
    fn an_answers_head_must_be_what_was_asked() {
        let asked = Request {
            id: ID.to_owned(),
            offset: 4,
            len: 10,
        };
        let bytes = Head::Bytes(10).encode();
        assert_eq!(bytes, [0, 0, 0, 0, 10]);
        assert_eq!(Head::decode(bytes, &asked), Ok(Head::Bytes(10)));
        assert!(Head::decode(Head::Bytes(9).encode(), &asked).is_err());
        assert_eq!(
            Head::decode(Head::Refused(5).encode(), &asked),
            Ok(Head::Refused(5))
        );
        assert!(Head::decode(Head::Refused(MAX_MESSAGE + 1).encode(), &asked).is_err());
        assert!(Head::decode([2, 0, 0, 0, 0], &asked).is_err());
        assert_eq!(refusal(&"é".repeat(600)).len(), 1024);
    }
}
