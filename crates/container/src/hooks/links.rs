//! `create-symlinks`: `ln -sf` inside the root.

use super::{FileKey, HookError, SeenLibraries};
use foldhash::{HashMap, HashMapExt};
use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
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
    let digests: HashMap<String, u64> = asked.into_iter().map(|(p, l)| (p, digest(&l))).collect();
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

    /// The key [`SeenLibraries`] knows `path` by, from std's `lstat`.
    fn key_of(path: &std::path::Path) -> FileKey {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).unwrap();
        FileKey {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec() as u64),
            ctime: (m.ctime(), m.ctime_nsec() as u64),
        }
    }

    /// A folder whose links a create found in place is taken at its key's word (nothing in it
    /// looked at: here a link removed behind the key's back is not made again), but only while
    /// its key is the one kept: anything made or removed in it since, and it is looked at, and
    /// what is missing made. One just changed is not kept as found in place at all.
    #[test]
    fn a_folder_found_in_place_is_looked_at_again_once_it_changed() {
        let t = tempfile::tempdir().unwrap();
        let lib = t.path().join("usr/lib");
        std::fs::create_dir_all(&lib).unwrap();
        let root = Root::open(t.path()).unwrap();
        let links: Vec<Link> = ["liba.so.1", "libb.so.1"]
            .iter()
            .map(|n| Link {
                target: format!("{n}.0"),
                link: format!("/usr/lib/{n}"),
            })
            .collect();
        let mut seen = SeenLibraries::default();
        create_symlinks_placed(&root, &links, Some(&mut seen)).unwrap();
        create_symlinks_placed(&root, &links, Some(&mut seen)).unwrap();
        // In place the second time, but changed moments before: not kept.
        assert_eq!(seen.learned(), 0);
        assert!(seen.is_empty());
        // Kept as an earlier create would have kept it, then a link removed and the folder's
        // new key kept in its place (as if nothing had changed).
        let asked: BTreeMap<String, &str> = links
            .iter()
            .map(|l| {
                (
                    l.link.rsplit('/').next().unwrap().to_string(),
                    l.target.as_str(),
                )
            })
            .collect();
        std::fs::remove_file(lib.join("libb.so.1")).unwrap();
        seen.insert_in_place(key_of(&lib), digest(&asked));
        let placed = create_symlinks_placed(&root, &links, Some(&mut seen)).unwrap();
        assert!(std::fs::symlink_metadata(lib.join("libb.so.1")).is_err());
        let id = {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(&lib).unwrap();
            (m.dev(), m.ino())
        };
        assert_eq!(placed.in_dir(id).map(HashMap::len), Some(2));
        let made = |name: &str| std::fs::read_link(lib.join(name)).ok();
        // Another set of links asked of the same folder is not what was found: looked at.
        let mut more = links.clone();
        more.push(Link {
            target: "libc.so.1.0".into(),
            link: "/usr/lib/libc.so.1".into(),
        });
        create_symlinks_placed(&root, &more, Some(&mut seen)).unwrap();
        assert_eq!(made("libb.so.1"), Some("libb.so.1.0".into()));
        assert_eq!(made("libc.so.1"), Some("libc.so.1.0".into()));
        // The same folder kept as found in place again, then changed (a link removed): looked
        // at, and the link made again.
        let key = key_of(&lib);
        seen.insert_in_place(key, digest(&asked));
        // Past the clock tick that stamped the key (what the 2 s a key must have settled for
        // stand for in a create).
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::remove_file(lib.join("libb.so.1")).unwrap();
        assert_ne!(key_of(&lib), key);
        create_symlinks_placed(&root, &links, Some(&mut seen)).unwrap();
        assert_eq!(made("libb.so.1"), Some("libb.so.1.0".into()));
    }
}
