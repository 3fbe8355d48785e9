//! Packet framing: a 3-byte little-endian payload length and a 1-byte sequence id, then the
//! payload. A payload of 0xFFFFFF bytes or more is split into 0xFFFFFF-byte frames followed
//! by a shorter (possibly empty) last frame, each with the next sequence id.
//!
//! Sans-I/O in the style of mini-redis's `Frame::check`: [`parse_packet`] looks at what is
//! buffered and says "complete", "need more bytes" or "invalid"; it never reads a socket.

use core::fmt;

/// Bytes of a packet header.
pub const HEADER_LEN: usize = 4;
/// The largest payload a single frame carries; a frame this size means "more follows".
pub const MAX_FRAME_PAYLOAD: usize = 0xFF_FFFF;

/// One logical packet, joined from its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The sequence id of the first frame.
    pub sequence_id: u8,
    /// The sequence id of the last frame (equal to `sequence_id` unless the payload was
    /// split); the peer's next packet carries this plus one.
    pub last_sequence_id: u8,
    /// The joined payload.
    pub payload: Vec<u8>,
}

/// A framing error: the stream cannot be trusted past this point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The payload is bigger than the caller's limit. Reported as soon as the headers show it,
    /// before the bytes arrive.
    TooLarge {
        /// The caller's limit.
        limit: usize,
    },
    /// A continuation frame did not carry the next sequence id.
    SequenceMismatch {
        /// The id that should have come.
        expected: u8,
        /// The id that came.
        actual: u8,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { limit } => write!(f, "packet larger than {limit} bytes"),
            Self::SequenceMismatch { expected, actual } => write!(
                f,
                "continuation frame has sequence id {actual}, expected {expected}"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Looks for one whole packet at the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, or the packet and the number of bytes it
/// took. Nothing is allocated until the whole packet is buffered, and never more than
/// `max_payload` bytes.
///
/// # Errors
/// [`FrameError`] when the packet exceeds `max_payload` or its frames are out of sequence.
pub fn parse_packet(buf: &[u8], max_payload: usize) -> Result<Option<(Packet, usize)>, FrameError> {
    // First pass: walk the frame headers, checking sizes and sequence ids, without copying.
    let mut offset = 0usize;
    let mut total = 0usize;
    let mut first_seq = None;
    let mut last_seq = 0u8;
    loop {
        let Some(&[l0, l1, l2, seq]) = buf.get(offset..offset + HEADER_LEN) else {
            return Ok(None);
        };
        let len = usize::from(l0) | usize::from(l1) << 8 | usize::from(l2) << 16;
        match first_seq {
            None => first_seq = Some(seq),
            Some(_) => {
                let expected = last_seq.wrapping_add(1);
                if seq != expected {
                    return Err(FrameError::SequenceMismatch {
                        expected,
                        actual: seq,
                    });
                }
            }
        }
        last_seq = seq;
        total += len;
        if total > max_payload {
            return Err(FrameError::TooLarge { limit: max_payload });
        }
        offset += HEADER_LEN + len;
        if buf.len() < offset {
            return Ok(None);
        }
        if len < MAX_FRAME_PAYLOAD {
            break;
        }
    }
    // Second pass: copy the payload out of the (now known complete) frames.
    let mut payload = Vec::with_capacity(total);
    let mut rest = buf.get(..offset).unwrap_or_default();
    while let Some((header, tail)) = rest.split_at_checked(HEADER_LEN) {
        let len = header
            .iter()
            .take(3)
            .rev()
            .fold(0usize, |acc, &b| acc << 8 | usize::from(b));
        let Some((chunk, tail)) = tail.split_at_checked(len) else {
            break;
        };
        payload.extend_from_slice(chunk);
        rest = tail;
    }
    let packet = Packet {
        sequence_id: first_seq.unwrap_or_default(),
        last_sequence_id: last_seq,
        payload,
    };
    Ok(Some((packet, offset)))
}

/// Appends `payload` as one logical packet starting at `sequence_id`, split into frames as the
/// protocol requires. Returns the sequence id the peer's next packet should carry.
pub fn write_packet(out: &mut Vec<u8>, sequence_id: u8, payload: &[u8]) -> u8 {
    let mut seq = sequence_id;
    let mut chunks = payload.chunks(MAX_FRAME_PAYLOAD);
    loop {
        let chunk = chunks.next().unwrap_or_default();
        let [a, b, c, _] = (chunk.len() as u32).to_le_bytes();
        out.extend_from_slice(&[a, b, c, seq]);
        out.extend_from_slice(chunk);
        seq = seq.wrapping_add(1);
        // A full frame must be followed by another, empty if the payload ended exactly.
        if chunk.len() < MAX_FRAME_PAYLOAD {
            return seq;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_small_packet_and_reports_consumed_bytes() {
        let buf = [3, 0, 0, 7, b'a', b'b', b'c', 0xEE];
        let (p, used) = parse_packet(&buf, 100).unwrap().unwrap();
        assert_eq!((p.sequence_id, p.last_sequence_id, used), (7, 7, 7));
        assert_eq!(p.payload, b"abc");
    }

    #[test]
    fn needs_more_bytes_for_every_truncated_prefix() {
        let mut buf = Vec::new();
        write_packet(&mut buf, 0, b"hello");
        for n in 0..buf.len() {
            assert_eq!(parse_packet(&buf[..n], 100), Ok(None), "prefix {n}");
        }
    }

    #[test]
    fn round_trips_payloads_at_the_continuation_boundary() {
        for len in [
            0,
            1,
            MAX_FRAME_PAYLOAD - 1,
            MAX_FRAME_PAYLOAD,
            MAX_FRAME_PAYLOAD + 1,
            2 * MAX_FRAME_PAYLOAD,
        ] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut buf = Vec::new();
            let next = write_packet(&mut buf, 250, &payload);
            let frames = len / MAX_FRAME_PAYLOAD + 1;
            assert_eq!(buf.len(), len + frames * HEADER_LEN, "len {len}");
            assert_eq!(next, 250u8.wrapping_add(frames as u8));
            let (p, used) = parse_packet(&buf, 3 * MAX_FRAME_PAYLOAD).unwrap().unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(p.payload.len(), len);
            assert!(p.payload == payload);
            assert_eq!(p.last_sequence_id, next.wrapping_sub(1));
        }
    }

    #[test]
    fn rejects_oversized_packet_from_its_header() {
        // Only the header has arrived; the claim alone is enough to refuse.
        assert_eq!(
            parse_packet(&[0xFF, 0xFF, 0x00, 0], 1024),
            Err(FrameError::TooLarge { limit: 1024 })
        );
    }

    #[test]
    fn rejects_continuation_with_wrong_sequence_id() {
        let mut buf = vec![0xFF, 0xFF, 0xFF, 1];
        buf.resize(HEADER_LEN + MAX_FRAME_PAYLOAD, 0);
        buf.extend_from_slice(&[0, 0, 0, 5]);
        assert_eq!(
            parse_packet(&buf, usize::MAX),
            Err(FrameError::SequenceMismatch {
                expected: 2,
                actual: 5
            })
        );
    }
}
