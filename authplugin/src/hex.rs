//! Hex encoding for key files and stored hashes (lower-case out, either case in).

/// Lower-case hex of `bytes`.
#[must_use]
pub fn encode(bytes: &[u8]) -> String {
    use core::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Decodes exactly `N` bytes of hex; `None` on a wrong length or a non-hex digit.
#[must_use]
pub fn decode_array<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let v = decode(hex)?;
    v.try_into().ok()
}

/// Decodes hex of any even length; `None` on an odd length or a non-hex digit.
#[must_use]
pub fn decode(hex: &str) -> Option<Vec<u8>> {
    let bytes = hex.as_bytes();
    if bytes.len() % 2 != 0 {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some((nibble(*hi)? << 4) | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_all_bytes() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)), Some(all));
    }

    #[test]
    fn rejects_odd_length_and_non_hex() {
        assert_eq!(decode("abc"), None);
        assert_eq!(decode("zz"), None);
        assert_eq!(decode_array::<2>("aabb"), Some([0xAA, 0xBB]));
        assert_eq!(decode_array::<2>("aa"), None);
    }
}
