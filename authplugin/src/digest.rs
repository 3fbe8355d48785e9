//! The two primitives both scramble plugins are built from: a hash over several parts, and a
//! byte-wise XOR of two digests.

use sha1::Digest;

/// `D(parts[0] || parts[1] || ...)` as an array of the digest's length.
pub(crate) fn hash<D, const N: usize>(parts: &[&[u8]]) -> [u8; N]
where
    D: Digest,
    sha1::digest::Output<D>: Into<[u8; N]>,
{
    let mut h = D::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `a XOR b`, byte by byte.
pub(crate) fn xor<const N: usize>(a: &[u8; N], b: &[u8; N]) -> [u8; N] {
    let mut out = [0u8; N];
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x ^ y;
    }
    out
}
