//! `create-symlinks`: `ln -sf` inside the root.

use super::{FileKey, HookError, SeenLibraries};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use crate::root::{Dir, LinkOutcome, Metadata, Root};

pub use gpuctk_core::ops::Link;

/// `ln -sf` for each link inside the root: parents created (0755), links
/// already pointing at their target left alone, files and other links
/// replaced, directories refused.
pub fn create_symlinks(root: &Root, links: &[Link]) -> Result<(), HookError> {
    create_symlinks_placed(root, links, None).map(|_| ())
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

/// A folder [`create_symlinks_placed`] works in.
struct Folder<'r> {
    dir: Dir<'r>,
    /// What it was when opened.
    md: Metadata,
    /// An earlier create found every link asked of it in place, and it has not changed since.
    in_place: bool,
}

/// The digest of the links asked of one folder (name → target, the last of a name winning),
/// by which [`SeenLibraries::in_place`] knows them.
fn digest(links: &BTreeMap<String, &str>) -> u64 {
    let mut text = b"links\0".to_vec();
    for (name, target) in links {
        for part in [name.as_bytes(), target.as_bytes()] {
            text.extend_from_slice(part);
            text.push(0);
        }
    }
    super::fnv1a64(&text)
}

/// [`create_symlinks`], returning the links it left in place. `seen`: what earlier creates
/// found in place (the shim keeps it between containers): a folder of a root that persists
/// which an earlier create found holding every link asked of it, unchanged since, is not looked
/// at again; one found so now is added to it.
pub fn create_symlinks_placed(
    root: &Root,
    links: &[Link],
    seen: Option<&mut SeenLibraries>,
) -> Result<Placed, HookError> {
    let began = SystemTime::now();
    // The links asked of each folder, as written.
    let mut asked: HashMap<String, BTreeMap<String, &str>> = HashMap::new();
    let mut split = Vec::with_capacity(links.len());
    for l in links {
        let (parent, name) = crate::root::split_parent(&l.link)?;
        let name = name.to_string_lossy().into_owned();
        asked
            .entry(parent.clone())
            .or_default()
            .insert(name.clone(), &l.target);
        split.push((parent, name, l));
    }
    let digests: HashMap<String, u64> = asked.iter().map(|(p, l)| (p.clone(), digest(l))).collect();
    // Most links share one folder: it is made and opened once, and every link of it is made
    // through that descriptor (one name each, nothing walked; the descriptor stays inside the
    // root whatever the image's links do meanwhile). A link that replaced something may have
    // been a folder's path (a symlink to it): the folders are resolved again.
    let mut open: HashMap<String, Folder<'_>> = HashMap::new();
    let mut placed = Placed::default();
    let mut changed = false;
    for (parent, name, l) in split {
        let digest = digests.get(&parent).copied().unwrap_or_default();
        let folder = match open.entry(parent) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let dir = root.mkdir_all_open(v.key(), 0o755)?;
                let md = dir.metadata()?;
                let in_place = seen
                    .as_deref()
                    .is_some_and(|s| s.in_place(&FileKey::of(&md), digest));
                v.insert(Folder { dir, md, in_place })
            }
        };
        let id = (folder.md.dev, folder.md.ino);
        let outcome = if folder.in_place {
            LinkOutcome::Unchanged
        } else {
            folder.dir.symlink_force(&l.target, &name)?
        };
        // Whatever it was, the name now leads to the target (a later link of the same name
        // and folder overrides it here as it does there).
        placed.insert(id, &name, &l.target);
        changed |= outcome != LinkOutcome::Unchanged;
        if outcome == LinkOutcome::Replaced {
            open.clear();
        }
    }
    // Every link was there already: each folder holding them is kept as found in place.
    if let (false, Some(seen)) = (changed, seen) {
        for (parent, folder) in &open {
            if !folder.in_place {
                let digest = digests.get(parent).copied().unwrap_or_default();
                seen.note_in_place(&folder.md, digest, began);
            }
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
