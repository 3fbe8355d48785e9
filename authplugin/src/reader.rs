//! A checked cursor over untrusted bytes.
//!
//! Every decoder in this crate reads through [`Reader`]: a read past the end is a
//! [`DecodeError::MissingData`] naming what was missing, never a panic, and no read
//! allocates more than the bytes that are actually present.

use core::fmt;

/// Why a byte string could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended before the named field was complete.
    MissingData(&'static str),
    /// The value was complete but bytes followed it; the count of extra bytes.
    TrailingBytes(usize),
    /// A field was present but its content is not allowed; the field's name.
    InvalidValue(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingData(what) => write!(f, "truncated: missing {what}"),
            Self::TrailingBytes(n) => write!(f, "{n} unexpected trailing byte(s)"),
            Self::InvalidValue(what) => write!(f, "invalid {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A forward-only cursor that cannot read out of bounds.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    #[must_use]
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The bytes not yet read.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The next byte without consuming it.
    #[must_use]
    pub fn peek(&self) -> Option<u8> {
        self.buf.first().copied()
    }

    /// Takes exactly `n` bytes.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] with `what` if fewer than `n` bytes remain.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::MissingData(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// Takes a fixed-size array.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if fewer than `N` bytes remain.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Takes everything that is left (MySQL's `string<EOF>`).
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.buf)
    }

    /// Reads one byte.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] at the end of input.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let [b] = self.array::<1>(what)?;
        Ok(b)
    }

    /// Reads a little-endian `int<2>`.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if fewer than 2 bytes remain.
    pub fn u16_le(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian `int<3>`.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if fewer than 3 bytes remain.
    pub fn u24_le(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let [a, b, c] = self.array(what)?;
        Ok(u32::from_le_bytes([a, b, c, 0]))
    }

    /// Reads a little-endian `int<4>`.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if fewer than 4 bytes remain.
    pub fn u32_le(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian `int<8>`.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if fewer than 8 bytes remain.
    pub fn u64_le(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Reads a MySQL length-encoded integer (`int<lenenc>`).
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if truncated; [`DecodeError::InvalidValue`] for the
    /// prefixes 0xFB (NULL) and 0xFF, which are not integers.
    pub fn lenenc_int(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        match self.u8(what)? {
            n @ 0..=0xFA => Ok(u64::from(n)),
            0xFC => Ok(u64::from(self.u16_le(what)?)),
            0xFD => Ok(u64::from(self.u24_le(what)?)),
            0xFE => self.u64_le(what),
            0xFB | 0xFF => Err(DecodeError::InvalidValue(what)),
        }
    }

    /// Reads a length-encoded string (`string<lenenc>`). The length is checked against the
    /// bytes present before anything is sliced, so a huge claimed length costs nothing.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if the length or the bytes are missing.
    pub fn lenenc_bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.lenenc_int(what)?;
        let len = usize::try_from(len).map_err(|_| DecodeError::MissingData(what))?;
        self.take(len, what)
    }

    /// Reads a string with a one-byte length prefix.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if the length or the bytes are missing.
    pub fn u8_prefixed(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u8(what)?;
        self.take(usize::from(len), what)
    }

    /// Reads a NUL-terminated string (`string<NUL>`), consuming the NUL but not returning it.
    ///
    /// # Errors
    /// [`DecodeError::MissingData`] if no NUL byte follows.
    pub fn nul_terminated(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::MissingData(what))?;
        let s = self.take(end, what)?;
        self.take(1, what)?;
        Ok(s)
    }

    /// Succeeds only when every byte has been read.
    ///
    /// # Errors
    /// [`DecodeError::TrailingBytes`] with the count of unread bytes.
    pub fn expect_empty(&self) -> Result<(), DecodeError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

/// Appends a MySQL length-encoded integer in its shortest form.
pub fn put_lenenc_int(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0xFA => out.push(n as u8),
        0xFB..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            let [a, b, c, ..] = n.to_le_bytes();
            out.extend_from_slice(&[0xFD, a, b, c]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Appends a length-encoded string.
pub fn put_lenenc_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_lenenc_int(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends a NUL-terminated string.
pub fn put_nul_terminated(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(bytes);
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_lenenc_width() {
        for n in [
            0u64,
            250,
            251,
            0xFFFF,
            0x1_0000,
            0xFF_FFFF,
            0x100_0000,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_lenenc_int(&mut out, n);
            let mut r = Reader::new(&out);
            assert_eq!(r.lenenc_int("n"), Ok(n));
            assert_eq!(r.expect_empty(), Ok(()));
        }
    }

    #[test]
    fn rejects_lenenc_null_and_error_markers() {
        assert_eq!(
            Reader::new(&[0xFB]).lenenc_int("n"),
            Err(DecodeError::InvalidValue("n"))
        );
        assert_eq!(
            Reader::new(&[0xFF]).lenenc_int("n"),
            Err(DecodeError::InvalidValue("n"))
        );
    }

    #[test]
    fn rejects_huge_claimed_length_without_allocating() {
        let bytes = [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 1, 2];
        assert_eq!(
            Reader::new(&bytes).lenenc_bytes("blob"),
            Err(DecodeError::MissingData("blob"))
        );
    }

    #[test]
    fn rejects_unterminated_string() {
        assert_eq!(
            Reader::new(b"abc").nul_terminated("s"),
            Err(DecodeError::MissingData("s"))
        );
        let mut r = Reader::new(b"abc\0d");
        assert_eq!(r.nul_terminated("s"), Ok(&b"abc"[..]));
        assert_eq!(r.expect_empty(), Err(DecodeError::TrailingBytes(1)));
    }
}
