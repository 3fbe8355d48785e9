//! The compute's greeting profile: what the relay's own greeting (P1) imitates so that a
//! client negotiates with the relay exactly what the compute will accept.
//!
//! Learnt from the compute's greeting every time the relay sees one, and kept in
//! `state_dir/profiles/<instance>.profile` so that the first client after a relay restart
//! already sees the right greeting. It never holds a scramble or anything secret.

use std::path::{Path, PathBuf};

use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::*;
use authplugin::{Scramble, hex};

/// Capabilities the relay never advertises on the perceptron route, whatever the compute
/// says: TLS (not terminated here) and compression (the relay reads the login in clear; a
/// compressed session would also have to be negotiated identically on both legs).
pub const NEVER_ADVERTISED: u32 = CLIENT_SSL | CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION_ALGORITHM;

/// Capabilities that change the command-phase wire format. A client must never negotiate one
/// of these with the relay that the compute lacks, or the session breaks after the login.
pub const FORMAT_CHANGING: u32 = CLIENT_DEPRECATE_EOF
    | CLIENT_SESSION_TRACK
    | CLIENT_QUERY_ATTRIBUTES
    | CLIENT_OPTIONAL_RESULTSET_METADATA
    | CLIENT_COMPRESS
    | CLIENT_ZSTD_COMPRESSION_ALGORITHM
    | MULTI_FACTOR_AUTHENTICATION;

/// MariaDB's extended capabilities the relay offers on the perceptron route where the compute
/// offers them, and carries into its own login to the compute, so a client gets the same types
/// whatever route it took (docs/clients.md): the command watch follows each
/// ([`crate::conversation`]). Not offered: cached metadata (result sets without column
/// definitions cannot be followed); progress reports (a statement whose last packet so far is
/// a progress report looks answered to the kernel splice's take-back, which could then park
/// the session mid-statement); anything newer than the relay.
pub const RELAYED_MARIADB_CAPABILITIES: u32 =
    MARIADB_CLIENT_STMT_BULK_OPERATIONS | MARIADB_CLIENT_EXTENDED_METADATA;

/// The parts of a greeting the relay copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeProfile {
    /// `server_version`.
    pub server_version: Vec<u8>,
    /// `capability_flags`.
    pub capability_flags: u32,
    /// `character_set`.
    pub character_set: u8,
    /// `status_flags`.
    pub status_flags: u16,
    /// The reserved bytes (MariaDB extended capabilities).
    pub reserved: [u8; 10],
}

impl ComputeProfile {
    /// What the relay assumes before it has ever seen the compute: exactly what server-shim
    /// (opensrv-mysql) advertises, so the embedded default is right from the first client.
    #[must_use]
    pub fn server_shim_default() -> Self {
        Self {
            server_version: b"8.0.36-perceptron-shim".to_vec(),
            capability_flags: CLIENT_PROTOCOL_41
                | CLIENT_SECURE_CONNECTION
                | CLIENT_PLUGIN_AUTH
                | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
                | CLIENT_CONNECT_WITH_DB
                | CLIENT_DEPRECATE_EOF,
            character_set: 0x21,
            // SERVER_STATUS_AUTOCOMMIT, as server-shim's greeting says (a session starts in
            // autocommit mode; drivers that read "off" here never turn it off themselves).
            status_flags: 0x0002,
            reserved: [0; 10],
        }
    }

    /// The profile of a compute's greeting. A server-shim's proof of key possession is cut
    /// from the version: it is bound to that greeting's scramble and means nothing to clients.
    #[must_use]
    pub fn from_greeting(g: &HandshakeV10) -> Self {
        Self {
            server_version: authplugin::compute_proof::version_without_proof(&g.server_version)
                .to_vec(),
            capability_flags: g.capability_flags,
            character_set: g.character_set,
            status_flags: g.status_flags,
            reserved: g.reserved,
        }
    }

    /// The relay's greeting (P1) for one client: this profile, scramble A, and the plugin
    /// whose answer the compute can check against scramble A.
    #[must_use]
    pub fn greeting(&self, connection_id: u32, scramble_a: &Scramble) -> HandshakeV10 {
        let mut g = HandshakeV10::new(
            self.server_version.clone(),
            connection_id,
            scramble_a,
            (self.capability_flags & !NEVER_ADVERTISED) | CLIENT_PROTOCOL_41,
            self.character_set,
            self.status_flags,
            "mysql_native_password",
        );
        // MariaDB's extended capabilities live in the last four of these bytes; only those the
        // relay carries into its login to the compute are offered (a client that negotiated
        // one the compute's session does not use would misread its results).
        g.reserved = [0; 10];
        if let Some(slot) = g.reserved.get_mut(6..) {
            slot.copy_from_slice(
                &(self.mariadb_capabilities() & RELAYED_MARIADB_CAPABILITIES).to_le_bytes(),
            );
        }
        g
    }

    /// Stops offering `missing` of MariaDB's extended capabilities.
    pub fn forget_mariadb_capabilities(&mut self, missing: u32) {
        let kept = self.mariadb_capabilities() & !missing;
        if let Some(slot) = self.reserved.get_mut(6..) {
            slot.copy_from_slice(&kept.to_le_bytes());
        }
    }

    /// The compute's MariaDB extended capabilities (0 for a MySQL compute).
    #[must_use]
    pub fn mariadb_capabilities(&self) -> u32 {
        if self.capability_flags & CLIENT_MYSQL_MARIADB != 0 {
            return 0;
        }
        let [.., a, b, c, d] = self.reserved;
        u32::from_le_bytes([a, b, c, d])
    }

    /// Text form for the state directory.
    #[must_use]
    pub fn to_text(&self) -> String {
        format!(
            "# Learnt from the compute's greeting. No secrets. Safe to delete.\n\
             server_version_hex={}\ncapability_flags={:#010x}\ncharacter_set={}\n\
             status_flags={}\nreserved_hex={}\n",
            hex::encode(&self.server_version),
            self.capability_flags,
            self.character_set,
            self.status_flags,
            hex::encode(&self.reserved)
        )
    }

    /// Parses [`ComputeProfile::to_text`]; `None` if anything is missing or malformed (the
    /// caller then falls back to the default and relearns).
    #[must_use]
    pub fn parse_text(text: &str) -> Option<Self> {
        let mut p = Self::server_shim_default();
        let mut seen = 0;
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let (k, v) = line.split_once('=')?;
            match k {
                "server_version_hex" => p.server_version = hex::decode(v)?,
                "capability_flags" => {
                    p.capability_flags = u32::from_str_radix(v.strip_prefix("0x")?, 16).ok()?;
                }
                "character_set" => p.character_set = v.parse().ok()?,
                "status_flags" => p.status_flags = v.parse().ok()?,
                "reserved_hex" => p.reserved = hex::decode_array(v)?,
                _ => return None,
            }
            seen += 1;
        }
        (seen == 5 && !p.server_version.contains(&0)).then_some(p)
    }
}

/// Where an instance's profile is kept.
#[must_use]
pub fn path(state_dir: &Path, instance: &str) -> PathBuf {
    state_dir
        .join("profiles")
        .join(format!("{instance}.profile"))
}

/// Loads a kept profile, if there is a valid one.
#[must_use]
pub fn load(state_dir: &Path, instance: &str) -> Option<ComputeProfile> {
    let text = std::fs::read_to_string(path(state_dir, instance)).ok()?;
    ComputeProfile::parse_text(&text)
}

/// Keeps a profile (atomically: write a temporary file, then rename). Saves may run at once
/// (several logins learn the same compute): each writes a temporary file of its own, and the
/// last rename wins.
///
/// # Errors
/// The file system's error.
pub fn save(state_dir: &Path, instance: &str, profile: &ComputeProfile) -> std::io::Result<()> {
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let target = path(state_dir, instance);
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = target.with_extension(format!("profile.{}.{n}.tmp", std::process::id()));
    let written =
        std::fs::write(&tmp, profile.to_text()).and_then(|()| std::fs::rename(&tmp, &target));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_at_once_never_fail_and_leave_one_whole_profile() {
        // One temporary name for every save let one save rename another's file away
        // ("No such file or directory").
        let dir = std::env::temp_dir().join(format!("profile-saves-{}", std::process::id()));
        let p = ComputeProfile::server_shim_default();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        save(&dir, "demo", &p).unwrap();
                    }
                });
            }
        });
        assert_eq!(load(&dir, "demo"), Some(p));
        let left: Vec<_> = std::fs::read_dir(path(&dir, "demo").parent().unwrap())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn round_trips_text_form() {
        let mut p = ComputeProfile::server_shim_default();
        p.reserved[9] = 0x1d;
        assert_eq!(ComputeProfile::parse_text(&p.to_text()), Some(p));
    }

    #[test]
    fn rejects_incomplete_or_garbled_text() {
        let p = ComputeProfile::server_shim_default().to_text();
        assert_eq!(
            ComputeProfile::parse_text(&p.replace("character_set=33\n", "")),
            None
        );
        assert_eq!(ComputeProfile::parse_text(&p.replace("0x", "zz")), None);
        assert_eq!(ComputeProfile::parse_text("junk"), None);
    }

    #[test]
    fn greeting_never_advertises_tls_or_compression() {
        let mut p = ComputeProfile::server_shim_default();
        p.capability_flags |= CLIENT_SSL | CLIENT_COMPRESS;
        let g = p.greeting(1, &Scramble::from_bytes([b'x'; 20]));
        assert_eq!(g.capability_flags & (CLIENT_SSL | CLIENT_COMPRESS), 0);
        assert_ne!(g.capability_flags & CLIENT_PLUGIN_AUTH, 0);
        assert_eq!(
            g.auth_plugin_name.as_deref(),
            Some(&b"mysql_native_password"[..])
        );
        assert_eq!(g.scramble(), Some(Scramble::from_bytes([b'x'; 20])));
    }

    /// A MariaDB compute's extended capabilities are offered where the relay carries them
    /// (bulk operations, extended metadata), never progress reports, cached metadata or one
    /// newer than the relay; a MySQL compute's filler stays zeros.
    #[test]
    fn greeting_offers_the_mariadb_capabilities_the_relay_carries() {
        let mut p = ComputeProfile::server_shim_default();
        p.capability_flags &= !CLIENT_MYSQL_MARIADB;
        let compute = MARIADB_CLIENT_PROGRESS
            | MARIADB_CLIENT_STMT_BULK_OPERATIONS
            | MARIADB_CLIENT_EXTENDED_METADATA
            | MARIADB_CLIENT_CACHE_METADATA
            | 1 << 6;
        p.reserved[6..].copy_from_slice(&compute.to_le_bytes());
        let g = p.greeting(1, &Scramble::from_bytes([b'x'; 20]));
        assert_eq!(
            g.mariadb_extended_capabilities(),
            Some(MARIADB_CLIENT_STMT_BULK_OPERATIONS | MARIADB_CLIENT_EXTENDED_METADATA)
        );
        assert_eq!(g.reserved[..6], [0; 6]);
        p.forget_mariadb_capabilities(MARIADB_CLIENT_EXTENDED_METADATA);
        let g = p.greeting(1, &Scramble::from_bytes([b'x'; 20]));
        assert_eq!(
            g.mariadb_extended_capabilities(),
            Some(MARIADB_CLIENT_STMT_BULK_OPERATIONS)
        );

        let mut mysql = ComputeProfile::server_shim_default();
        mysql.capability_flags |= CLIENT_MYSQL_MARIADB;
        mysql.reserved[6..].copy_from_slice(&compute.to_le_bytes());
        let g = mysql.greeting(1, &Scramble::from_bytes([b'x'; 20]));
        assert_eq!(g.reserved, [0; 10]);
    }
}
