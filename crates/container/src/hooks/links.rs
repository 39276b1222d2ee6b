//! `create-symlinks`: `ln -sf` inside the root.

use super::HookError;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

use crate::root::{Dir, LinkOutcome, Root};

pub use gpuctk_core::ops::Link;

/// `ln -sf` for each link inside the root: parents created (0755), links
/// already pointing at their target left alone, files and other links
/// replaced, directories refused.
pub fn create_symlinks(root: &Root, links: &[Link]) -> Result<(), HookError> {
    create_symlinks_placed(root, links).map(|_| ())
}

/// The links [`create_symlinks_placed`] left in place (made, replaced or found right), by the
/// folder holding them, named by device and inode so that no path leads a later reader to
/// another folder: what a following `update-ldcache` of the same run need not look at again
/// ([`super::Pending::add_links`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    pub(super) by_dir: HashMap<(u64, u64), HashMap<String, String>>,
}

impl Placed {
    /// Link `name` of folder `dir` (device, inode) leads to `target`.
    pub fn insert(&mut self, dir: (u64, u64), name: &str, target: &str) {
        self.by_dir
            .entry(dir)
            .or_default()
            .insert(name.to_string(), target.to_string());
    }

    /// The links of folder `dir`: name → target.
    pub fn in_dir(&self, dir: (u64, u64)) -> Option<&HashMap<String, String>> {
        self.by_dir.get(&dir)
    }

    /// Whether it holds no link.
    pub fn is_empty(&self) -> bool {
        self.by_dir.values().all(HashMap::is_empty)
    }
}

/// [`create_symlinks`], returning the links it left in place.
pub fn create_symlinks_placed(root: &Root, links: &[Link]) -> Result<Placed, HookError> {
    // Most links share one folder: it is made and opened once, and every link of it is made
    // through that descriptor (one name each, nothing walked; the descriptor stays inside the
    // root whatever the image's links do meanwhile). A link that replaced something may have
    // been a folder's path (a symlink to it): the folders are resolved again.
    let mut open: HashMap<String, (Dir<'_>, (u64, u64))> = HashMap::new();
    let mut placed = Placed::default();
    for l in links {
        let (parent, name) = crate::root::split_parent(&l.link)?;
        let (dir, id) = match open.entry(parent) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let dir = root.mkdir_all_open(v.key(), 0o755)?;
                let id = dir.id()?;
                v.insert((dir, id))
            }
        };
        let name = name.to_string_lossy();
        let outcome = dir.symlink_force(&l.target, &name)?;
        // Whatever it was, the name now leads to the target (a later link of the same name
        // and folder overrides it here as it does there).
        placed.insert(*id, &name, &l.target);
        if outcome == LinkOutcome::Replaced {
            open.clear();
        }
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_parse() {
        let l = Link::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap();
        assert_eq!(l.target, "libcuda.so.1");
        assert_eq!(l.link, "/usr/lib64/libcuda.so");
        let l: Link = "../lib/x.so::/a/b::c".parse().unwrap();
        assert_eq!(
            (l.target.as_str(), l.link.as_str()),
            ("../lib/x.so", "/a/b::c")
        );
        for bad in ["", "abc", "::/x", "a::", "a::rel/path", "a:/x"] {
            let e = Link::parse(bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("TARGET::LINK"), "{msg}");
        }
    }
}
