//! `create-symlinks`: `ln -sf` inside the root.

use super::HookError;
use std::collections::hash_map::Entry;

use crate::root::{Dir, LinkOutcome, Root};

pub use gpuctk_core::ops::Link;

/// `ln -sf` for each link inside the root: parents created (0755), links
/// already pointing at their target left alone, files and other links
/// replaced, directories refused.
pub fn create_symlinks(root: &Root, links: &[Link]) -> Result<(), HookError> {
    // Most links share one folder: it is made and opened once, and every link of it is made
    // through that descriptor (one name each, nothing walked; the descriptor stays inside the
    // root whatever the image's links do meanwhile). A link that replaced something may have
    // been a folder's path (a symlink to it): the folders are resolved again.
    let mut open: std::collections::HashMap<String, Dir<'_>> = std::collections::HashMap::new();
    for l in links {
        let (parent, name) = crate::root::split_parent(&l.link)?;
        let dir = match open.entry(parent) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let dir = root.mkdir_all_open(v.key(), 0o755)?;
                v.insert(dir)
            }
        };
        if dir.symlink_force(&l.target, &name.to_string_lossy())? == LinkOutcome::Replaced {
            open.clear();
        }
    }
    Ok(())
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
