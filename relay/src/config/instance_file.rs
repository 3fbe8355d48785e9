//! Instance files: one instance per file in `relay.instances_dir` (docs/instances.md). A file
//! holds what an `[[instance]]` block holds, at its top level (`[tls]`, `[driver]` … for the
//! sub-tables); its name is the instance's name with `.toml` after it, and a `name` key, when
//! given, must say the same. The values are checked exactly as an `[[instance]]` block's are,
//! with the relay's settings of the configuration file that names the directory.

use std::path::Path;

use super::load::{instance, syntax, typed};
use super::{Config, ConfigError, InstanceConfig, InstanceFile, RouteMode};

/// The suffix of an instance file.
pub const SUFFIX: &str = ".toml";

pub use super::fields::is_instance_name;

/// The instance a file in the instances directory is for: its name without [`SUFFIX`], or
/// `None` for a file the relay does not read (another suffix, or a hidden file such as an
/// editor's or the admin API's temporary copy).
#[must_use]
pub fn instance_name(file_name: &str) -> Option<&str> {
    if file_name.starts_with('.') {
        return None;
    }
    file_name.strip_suffix(SUFFIX).filter(|n| !n.is_empty())
}

/// Why the relay would not read a file or directory of instance files: an instance file names
/// programs the relay runs (as root, often), so only root and the relay's own user may be able
/// to write one, or the directory (which holds what to run). `None`: trusted.
#[must_use]
pub fn untrusted(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let relay = nix::unistd::geteuid().as_raw();
    let mode = meta.permissions().mode();
    if meta.uid() != 0 && meta.uid() != relay {
        Some(format!(
            "owned by uid {}, neither root nor the relay's user: an instance file names \
             programs the relay runs",
            meta.uid()
        ))
    } else if mode & 0o022 != 0 {
        Some(format!(
            "mode {:04o}: writable by group or others, and an instance file names programs \
             the relay runs (run: chmod go-w …)",
            mode & 0o7777
        ))
    } else {
        None
    }
}

/// Reads the instance file at `path` if [`untrusted`] finds nothing against it (checked on
/// the open file, so nothing is swapped in between).
///
/// # Errors
/// The read's error, or `PermissionDenied` with why the file is not trusted.
pub fn read_trusted(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    if let Some(why) = untrusted(&file.metadata()?) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        ));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// [`untrusted`] for the directory of instance files.
///
/// # Errors
/// The `stat`'s error, or `PermissionDenied` with why the directory is not trusted.
pub fn check_directory(dir: &Path) -> std::io::Result<()> {
    match untrusted(&std::fs::metadata(dir)?) {
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        )),
        None => Ok(()),
    }
}

impl Config {
    /// Reads the instance defined by `text`, which came from instance file `path` (or is to be
    /// written there), checked as an `[[instance]]` of this configuration; relative paths in
    /// it are relative to `base`.
    ///
    /// # Errors
    /// [`ConfigError`] naming `path` and the key.
    pub fn parse_instance_file(
        &self,
        text: &str,
        path: &Path,
        base: &Path,
    ) -> Result<InstanceConfig, ConfigError> {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let Some(stem) = instance_name(file_name) else {
            let message = format!("an instance file's name is the instance's name and {SUFFIX}");
            return Err(ConfigError::invalid(path, "name".into(), message));
        };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| ConfigError {
            path: path.to_owned(),
            key: None,
            problem: syntax(text, &e),
        })?;
        match table.get("name") {
            None => {
                table.insert("name".into(), toml::Value::String(stem.to_owned()));
            }
            Some(toml::Value::String(name)) if name == stem => {}
            Some(other) => {
                let given = other
                    .as_str()
                    .map_or_else(|| format!("a {}", other.type_str()), |s| format!("'{s}'"));
                let message = format!(
                    "{given} differs from the file's name ('{stem}'): rename the file or remove \
                     the key"
                );
                return Err(ConfigError::invalid(path, "name".into(), message));
            }
        }
        let inst: InstanceFile = typed(toml::Value::Table(table), "", path)?;
        let key = |field: &str| field.to_owned();
        if inst.listen.is_none() && self.endpoints.is_empty() {
            let message = "required unless an [[endpoint]] routes to the instance";
            return Err(ConfigError::invalid(path, key("listen"), message));
        }
        if inst.route == RouteMode::Nftables {
            // The kernel route's table is made at start from the configuration file's
            // instances; rules for instances that come and go are not written yet.
            let message = "\"nftables\" is for instances of the configuration file only; an \
                           instance file takes route = \"pump\"";
            return Err(ConfigError::invalid(path, key("route"), message));
        }
        let fleet = self.relay.store != super::StoreSettings::Local;
        let cfg = instance(inst, &key, base, path, fleet)?;
        let admin = self
            .relay
            .admin_listen
            .map(|a| ("relay.admin_listen".to_owned(), a));
        let own = cfg.listen.map(|l| ("listen".to_owned(), l));
        if let Some(message) = self
            .listen_addresses()
            .chain(admin)
            .chain(own)
            .find_map(|(other, addr)| super::compute_on_relay_listener(cfg.compute, &other, addr))
        {
            return Err(ConfigError::invalid(path, key("compute"), message));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn only_files_root_or_the_relay_alone_can_write_are_read() {
        let dir = std::env::temp_dir().join(format!("perceptron-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shop.toml");
        std::fs::write(&file, "compute = \"127.0.0.1:1\"\n").unwrap();
        let mode = |path: &std::path::Path, m: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).unwrap();
        };
        mode(&file, 0o644);
        mode(&dir, 0o755);
        assert!(super::read_trusted(&file).unwrap().starts_with("compute"));
        super::check_directory(&dir).unwrap();
        mode(&file, 0o664);
        let e = super::read_trusted(&file).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(
            e.to_string()
                .starts_with("mode 0664: writable by group or others"),
            "{e}"
        );
        mode(&dir, 0o777);
        assert!(super::check_directory(&dir).is_err());
        mode(&dir, 0o755);
        mode(&file, 0o644);
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
            let e = super::read_trusted(&file).unwrap_err();
            assert!(e.to_string().starts_with("owned by uid 65534"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
