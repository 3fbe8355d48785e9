//! Instance definitions in a fleet's store, sealed by the relays that wrote them.
//!
//! An instance definition names the programs a relay runs (the process driver's command, the
//! exec driver's commands) and their arguments and environment: whoever can write the store
//! could otherwise run anything on every relay. A relay writes a definition (the admin API's
//! `PUT`) with a last line that seals it, and runs a definition from the store only when that
//! line verifies with a key of its `[relay.store] definitions_key_file`:
//!
//! ```text
//! <the definition's text, as the operator sent it>
//! # perceptron-seal v1 <key id> <HMAC-SHA256, hex>
//! ```
//!
//! The MAC covers a context string, the instance's name and the text, so a sealed text cannot
//! be moved to another name. The key file has the key file's format (`relay keygen`): the
//! newest key seals, every key verifies, so keys rotate as the relay's own do. It is a key of
//! the relays' only (computes never hold it): a compute that holds the relays' login key
//! cannot seal a definition. Pure functions: no I/O.

use authplugin::identity::{KeyId, KeyRing};

/// Domain separation of the seal's MAC.
const CONTEXT: &[u8] = b"perceptron-fleet-definition-v1";
/// The seal line's start.
const PREFIX: &str = "# perceptron-seal v1 ";

/// Why a stored definition is not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealError {
    /// It has no seal line (written to the store by something other than a relay).
    Unsealed,
    /// Its seal line does not parse.
    Malformed,
    /// Sealed with a key this relay does not have.
    UnknownKey(String),
    /// The MAC does not verify: the text, or its name, changed after it was sealed.
    Forged,
    /// This relay has no key to verify seals with.
    NoKey,
}

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsealed => f.write_str(
                "not sealed by a relay of this fleet (written to the store directly?); it is \
                 not run: put it through a relay's admin API (relay instances put)",
            ),
            Self::Malformed => f.write_str("its seal line does not parse; it is not run"),
            Self::UnknownKey(id) => write!(
                f,
                "sealed with key '{id}', which is not in this relay's \
                 [relay.store] definitions_key_file; it is not run"
            ),
            Self::Forged => f.write_str(
                "its seal does not match its text or its name (changed after it was sealed); \
                 it is not run",
            ),
            Self::NoKey => f.write_str(
                "this relay has no [relay.store] definitions_key_file to verify definitions \
                 with; it runs none from the store",
            ),
        }
    }
}

impl std::error::Error for SealError {}

/// `text`, instance `name`'s definition, with its seal line (by `ring`'s signing key).
#[must_use]
pub fn seal(ring: &KeyRing, name: &str, text: &str) -> String {
    let key = ring.signing_key();
    let mac = key.sign(&[CONTEXT, name.as_bytes(), &[0], text.as_bytes()]);
    let mut out = text.to_owned();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(PREFIX);
    out.push_str(key.id().as_str());
    out.push(' ');
    out.push_str(&authplugin::hex::encode(&mac));
    out.push('\n');
    out
}

/// The definition of `name` that `stored` seals, once its seal verifies with `ring`.
///
/// # Errors
/// [`SealError`]: no seal, a seal that does not parse, an unknown key, a MAC that does not
/// verify, or no ring.
pub fn unseal<'a>(
    ring: Option<&KeyRing>,
    name: &str,
    stored: &'a str,
) -> Result<&'a str, SealError> {
    // Blank lines after the seal (a tool that adds a newline when it writes) are not part of it.
    let body = stored.trim_end_matches(['\n', '\r']);
    let (text, line) = match body.rsplit_once('\n') {
        Some((text, line)) => (text, line),
        None => ("", body),
    };
    let seal = line.strip_prefix(PREFIX).ok_or(SealError::Unsealed)?;
    let ring = ring.ok_or(SealError::NoKey)?;
    let (id, mac) = seal.split_once(' ').ok_or(SealError::Malformed)?;
    let id = KeyId::new(id).map_err(|_| SealError::Malformed)?;
    let mac = authplugin::hex::decode(mac).ok_or(SealError::Malformed)?;
    let key = ring
        .get(&id)
        .ok_or_else(|| SealError::UnknownKey(id.as_str().to_owned()))?;
    // What `seal` signed: the text as sent, which ended with a newline unless it was empty.
    let signed_len = if text.is_empty() { 0 } else { text.len() + 1 };
    let signed = stored.get(..signed_len).ok_or(SealError::Malformed)?;
    for sent in [signed, text] {
        if key.verify(&[CONTEXT, name.as_bytes(), &[0], sent.as_bytes()], &mac) {
            return Ok(sent);
        }
    }
    Err(SealError::Forged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use authplugin::identity::PerceptronKey;

    fn key(id: &str, byte: u8) -> PerceptronKey {
        let line = format!("{id} {}", "0".repeat(62) + &format!("{byte:02x}"));
        KeyRing::parse(&line).unwrap().signing_key().clone()
    }

    fn ring(id: &str, byte: u8) -> KeyRing {
        KeyRing::new(vec![key(id, byte)]).unwrap()
    }

    #[test]
    fn a_sealed_definition_unseals_to_its_text() {
        let r = ring("defs-1", 7);
        for text in ["compute = \"127.0.0.1:3306\"\n", "compute = \"x\"", ""] {
            let stored = seal(&r, "shop", text);
            assert!(stored.contains("\n# perceptron-seal v1 defs-1 ") || text.is_empty());
            let unsealed = unseal(Some(&r), "shop", &stored).unwrap();
            assert_eq!(unsealed.trim_end(), text.trim_end(), "{stored:?}");
            let padded = format!("{stored}\n\n");
            assert_eq!(unseal(Some(&r), "shop", &padded), Ok(unsealed));
        }
    }

    #[test]
    fn refuses_what_no_relay_sealed_or_someone_changed() {
        let r = ring("defs-1", 7);
        let stored = seal(
            &r,
            "shop",
            "[driver]\nkind = \"exec\"\nstart = [\"true\"]\n",
        );
        assert_eq!(
            unseal(Some(&r), "shop", "[driver]\nkind = \"exec\"\n"),
            Err(SealError::Unsealed)
        );
        assert_eq!(unseal(Some(&r), "other", &stored), Err(SealError::Forged));
        let changed = stored.replace("true", "/tmp/evil");
        assert_eq!(unseal(Some(&r), "shop", &changed), Err(SealError::Forged));
        assert_eq!(
            unseal(Some(&ring("defs-1", 8)), "shop", &stored),
            Err(SealError::Forged)
        );
        assert_eq!(
            unseal(Some(&ring("defs-2", 7)), "shop", &stored),
            Err(SealError::UnknownKey("defs-1".into()))
        );
        assert_eq!(unseal(None, "shop", &stored), Err(SealError::NoKey));
        for bad in [
            "x\n# perceptron-seal v1 defs-1\n",
            "x\n# perceptron-seal v1 defs-1 zz\n",
            "x\n# perceptron-seal v1 bad/id 00\n",
        ] {
            assert_eq!(
                unseal(Some(&r), "shop", bad),
                Err(SealError::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_key_of_the_ring_verifies_and_the_newest_seals() {
        let (old, new) = (key("defs-1", 1), key("defs-2", 2));
        let before = KeyRing::new(vec![old.clone()]).unwrap();
        let both = KeyRing::new(vec![old, new]).unwrap();
        let sealed_before = seal(&before, "shop", "a = 1\n");
        assert_eq!(unseal(Some(&both), "shop", &sealed_before), Ok("a = 1\n"));
        assert!(seal(&both, "shop", "a = 1\n").contains(" defs-2 "));
    }
}
