//! `cdi transform root`: move the paths of a spec from one root to another (a driver installed
//! under `/run/nvidia/driver` seen as `/`, or the reverse), on whole path components only, as
//! NVIDIA's transformer does: host paths (mount and device-node host paths, the paths of hooks
//! that run on the host) or container paths (mount and device-node container paths, and the
//! arguments of createContainer/startContainer hooks, `TARGET::LINK` on both sides).

use crate::spec::{ContainerEdits, Spec};

/// Which paths a root transform moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelativeTo {
    /// Paths on the host.
    Host,
    /// Paths in the container.
    Container,
}

/// `path` with its leading `from` component(s) replaced by `to`; unchanged when `from` is not a
/// whole-component prefix.
pub fn transform_path(path: &str, from: &str, to: &str) -> String {
    let from = from.trim_end_matches('/');
    let to = to.trim_end_matches('/');
    if from.is_empty() {
        // `/` is the prefix of every absolute path.
        return match path.strip_prefix('/') {
            Some(rest) => format!("{to}/{rest}"),
            None => path.to_string(),
        };
    }
    match path.strip_prefix(from) {
        Some("") => {
            if to.is_empty() {
                "/".to_string()
            } else {
                to.to_string()
            }
        }
        Some(rest) if rest.starts_with('/') => format!("{to}{rest}"),
        _ => path.to_string(),
    }
}

fn args(args: &mut [String], from: &str, to: &str) {
    for a in args {
        *a = match a.split_once("::") {
            Some((target, link)) => format!(
                "{}::{}",
                transform_path(target, from, to),
                transform_path(link, from, to)
            ),
            None => transform_path(a, from, to),
        };
    }
}

fn edits(e: &mut ContainerEdits, from: &str, to: &str, rel: RelativeTo) {
    for n in &mut e.device_nodes {
        match rel {
            RelativeTo::Host => {
                let host = n.host_path.clone().unwrap_or_else(|| n.path.clone());
                n.host_path = Some(transform_path(&host, from, to));
            }
            RelativeTo::Container => n.path = transform_path(&n.path, from, to),
        }
    }
    for m in &mut e.mounts {
        match rel {
            RelativeTo::Host => m.host_path = transform_path(&m.host_path, from, to),
            RelativeTo::Container => m.container_path = transform_path(&m.container_path, from, to),
        }
    }
    for h in &mut e.hooks {
        let in_container = h.hook_name == "createContainer" || h.hook_name == "startContainer";
        match rel {
            RelativeTo::Host => {
                if h.hook_name != "startContainer" {
                    h.path = transform_path(&h.path, from, to);
                }
                if !in_container {
                    args(&mut h.args, from, to);
                }
            }
            RelativeTo::Container => {
                if h.hook_name == "startContainer" {
                    h.path = transform_path(&h.path, from, to);
                }
                if in_container {
                    args(&mut h.args, from, to);
                }
            }
        }
    }
}

/// Move `spec`'s `rel` paths from root `from` to root `to`.
pub fn transform_root(spec: &mut Spec, from: &str, to: &str, rel: RelativeTo) {
    edits(&mut spec.container_edits, from, to, rel);
    for d in &mut spec.devices {
        edits(&mut d.container_edits, from, to, rel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_components_only() {
        let t = |p, f, to| transform_path(p, f, to);
        assert_eq!(
            t("/run/nvidia/driver/usr/lib/x", "/run/nvidia/driver", "/"),
            "/usr/lib/x"
        );
        assert_eq!(t("/run/nvidia/driver", "/run/nvidia/driver/", "/"), "/");
        assert_eq!(
            t("/run/nvidia/drivers/x", "/run/nvidia/driver", "/"),
            "/run/nvidia/drivers/x"
        );
        assert_eq!(t("/usr/lib/x", "/", "/host"), "/host/usr/lib/x");
        assert_eq!(t("libcuda.so.1", "/", "/host"), "libcuda.so.1");
        assert_eq!(t("/usr/lib/x", "/usr", "/opt/usr"), "/opt/usr/lib/x");
    }
}
