//! `create-symlinks`: `ln -sf` inside the root.

use super::HookError;
use crate::root::{LinkOutcome, Root};

pub use gpuctk_core::ops::Link;

/// `ln -sf` for each link inside the root: parents created (0755), links
/// already pointing at their target left alone, files and other links
/// replaced, directories refused.
pub fn create_symlinks(root: &Root, links: &[Link]) -> Result<(), HookError> {
    // Most links share one folder: it is walked and made once (nothing else runs in the root
    // meanwhile; `symlink_force` still opens it in-root for each link). A link that replaced
    // something may have been a folder's path (a symlink to it): the folders are made again.
    let mut made = std::collections::HashSet::new();
    for l in links {
        let (parent, _) = crate::root::split_parent(&l.link)?;
        if !made.contains(&parent) {
            root.mkdir_all(&parent, 0o755)?;
            made.insert(parent);
        }
        if root.symlink_force(&l.target, &l.link)? == LinkOutcome::Replaced {
            made.clear();
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
