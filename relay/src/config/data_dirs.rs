//! Where an instance's offloaded data lives, and what it must not overlap: an offload moves the
//! data directory to the store and deletes it, so a directory that is, holds or is inside
//! another instance's, the relay's `state_dir`, or a `file://` store would take their files
//! with it.

use std::path::{Component, Path, PathBuf};

use super::{InstanceConfig, OffloadMover, StoreUrl};

/// The places of one instance's offload that must not overlap another's, by the key that
/// names each: its `data_dir` and its `file://` store, lexically normalised (`.` and `..`
/// resolved; symbolic links are not followed).
#[must_use]
pub fn places(inst: &InstanceConfig) -> Vec<(&'static str, PathBuf)> {
    let Some(OffloadMover::Relay(archive)) = inst.offload.as_ref().map(|o| &o.mover) else {
        return Vec::new();
    };
    let mut places = vec![("offload.data_dir", normalised(&archive.data_dir))];
    if let Ok(StoreUrl::File(dir)) = StoreUrl::parse(&archive.store) {
        places.push(("offload.store", normalised(Path::new(&dir))));
    }
    places
}

/// Why `inst`'s data directory may not be used beside `others` (instance configurations, or
/// named paths such as `relay.state_dir`): the first overlap, in words naming both keys.
#[must_use]
pub fn overlap(
    inst: &InstanceConfig,
    others: &[&InstanceConfig],
    fixed: &[(&str, &Path)],
) -> Option<String> {
    let ours = places(inst);
    let (_, data_dir) = ours.first()?;
    let mut theirs: Vec<(String, PathBuf)> = fixed
        .iter()
        .map(|(key, p)| ((*key).to_owned(), normalised(p)))
        .collect();
    theirs.extend(
        ours.iter()
            .skip(1)
            .map(|(k, p)| ((*k).to_owned(), p.clone())),
    );
    for other in others.iter().filter(|o| o.name != inst.name) {
        theirs.extend(
            places(other)
                .into_iter()
                .map(|(k, p)| (format!("instance '{}' {k}", other.name), p)),
        );
    }
    let (what, at) = theirs
        .iter()
        .find(|(_, p)| data_dir.starts_with(p) || p.starts_with(data_dir))?;
    Some(format!(
        "{} overlaps {what} ({}): an offload moves the data directory to the store and deletes \
         it, and would take the other's files with it",
        data_dir.display(),
        at.display()
    ))
}

/// `path` with `.` dropped and `..` taken back, without the file system.
fn normalised(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_are_compared_after_dot_dot_is_taken_back() {
        let n = |p: &str| super::normalised(std::path::Path::new(p));
        assert_eq!(n("/srv/a/../b/./c"), n("/srv/b/c"));
        assert!(n("/srv/a/..").starts_with(n("/srv")));
    }
}
