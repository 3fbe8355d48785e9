//! `[instance.driver] user` and `group` (the process driver's compute user), resolved to ids
//! when the configuration is read.

use std::path::Path;

use super::{ConfigError, RunAs};

/// `[instance.driver] user` and `group` as ids: a name is looked up in the system's user and
/// group databases now, so a typo is an error naming the key rather than a compute that fails
/// to start at its first wake.
pub(super) fn resolve(
    user: Option<&str>,
    group: Option<&str>,
    key: &str,
    path: &Path,
) -> Result<Option<RunAs>, ConfigError> {
    use nix::unistd::{Group, User};
    let Some(user) = user else {
        return match group {
            Some(_) => Err(ConfigError::invalid(
                path,
                format!("{key}.group"),
                "needs user: the compute would keep the relay's own user",
            )),
            None => Ok(None),
        };
    };
    let user_key = format!("{key}.user");
    let found = match user.parse::<u32>() {
        Ok(uid) => User::from_uid(uid.into()),
        Err(_) => User::from_name(user),
    };
    let (uid, primary) = match found {
        Ok(Some(u)) => (u.uid.as_raw(), u.gid.as_raw()),
        // A numeric id without a name is still an id.
        Ok(None) if user.parse::<u32>().is_ok() => (user.parse().unwrap_or(u32::MAX), u32::MAX),
        Ok(None) => {
            return Err(ConfigError::invalid(
                path,
                user_key,
                format!("no user '{user}' on this host"),
            ));
        }
        Err(e) => {
            return Err(ConfigError::invalid(
                path,
                user_key,
                format!("cannot look '{user}' up: {e}"),
            ));
        }
    };
    if uid == 0 {
        return Err(ConfigError::invalid(
            path,
            user_key,
            "is root: name an unprivileged user of the compute's own (the point is that it is \
             not the relay's)",
        ));
    }
    let group_key = format!("{key}.group");
    let gid = match group {
        None if primary == u32::MAX => {
            return Err(ConfigError::invalid(
                path,
                group_key,
                format!(
                    "needed: user {uid} has no entry in the user database to take its group from"
                ),
            ));
        }
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match Group::from_name(g) {
                Ok(Some(found)) => found.gid.as_raw(),
                Ok(None) => {
                    return Err(ConfigError::invalid(
                        path,
                        group_key,
                        format!("no group '{g}' on this host"),
                    ));
                }
                Err(e) => {
                    return Err(ConfigError::invalid(
                        path,
                        group_key,
                        format!("cannot look '{g}' up: {e}"),
                    ));
                }
            },
        },
    };
    if gid == 0 {
        return Err(ConfigError::invalid(
            path,
            group_key,
            "is root's group: name an unprivileged group (the point is that the compute \
             cannot read what root's group can)",
        ));
    }
    Ok(Some(RunAs { uid, gid }))
}
