//! Jetson (Tegra) CSV mode's edits, from what the CSV files name on the host
//! ([`gpuctk_host::csv::CsvHost`]): pure, so `cdi generate --mode csv` and the shim's
//! `mode = "csv"` cannot disagree.
//!
//! As NVIDIA's `pkg/nvcdi/lib-csv.go` builds them: the device (`0`, and `all`) holds the `dev`
//! nodes; the common edits mount the `dir` entries, the `lib` files and the files `sym` chains
//! end at, then `create-symlinks` recreates each chain's links (and `libcuda.so`, which CUDA
//! tools dlopen), and `update-ldcache` adds the libraries' folders.

use std::collections::BTreeMap;

use gpuctk_cdi::spec::{ContainerEdits, Device, Mount, Spec};
use gpuctk_host::csv::CsvHost;

use crate::ops::{InRootOp, Link};
use crate::plan::{cdi_node, FILE_MOUNT_OPTIONS};
use crate::request::DeviceId;
use crate::spec::SpecError;

/// The edits of CSV mode: the device's (its nodes) and the common ones, with the common hooks'
/// typed operations in order.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvEdits {
    /// The device nodes.
    pub device: ContainerEdits,
    /// Mounts and hooks every container of the device gets.
    pub common: ContainerEdits,
    /// `common.hooks`, typed.
    pub ops: Vec<InRootOp>,
}

/// Whether a file name is a library's, as NVIDIA's ldcache hook tells (`lib*.so*`).
fn is_library(name: &str) -> bool {
    name.starts_with("lib") && name.contains(".so")
}

fn dir_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) => "/",
        Some((d, _)) => d,
        None => "/",
    }
}

/// Plan CSV mode's edits for `host`; `hook_path` is the hook binary written into hooks.
pub fn csv_edits(host: &CsvHost, hook_path: &str) -> CsvEdits {
    let device = ContainerEdits {
        device_nodes: host.devices.iter().map(cdi_node).collect(),
        ..Default::default()
    };
    let mount = |host: &std::path::Path, path: &str| Mount {
        host_path: host.to_string_lossy().into_owned(),
        container_path: path.to_string(),
        r#type: None,
        options: FILE_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let mut common = ContainerEdits::default();
    for d in &host.dirs {
        common.mounts.push(mount(&d.host_path, &d.path));
    }
    for f in &host.files {
        common.mounts.push(mount(&f.host_path, &f.path));
    }
    let mut links: Vec<Link> = host
        .links
        .iter()
        .map(|l| Link {
            target: l.target.clone(),
            link: l.link.clone(),
        })
        .collect();
    // CUDA's tools dlopen the unversioned name; NVIDIA adds it next to each libcuda.
    for f in &host.files {
        let name = f.path.rsplit('/').next().unwrap_or("");
        if name.starts_with("libcuda.so") && name != "libcuda.so" {
            let link = format!("{}/libcuda.so", dir_of(&f.path).trim_end_matches('/'));
            if !links.iter().any(|l| l.link == link) {
                links.push(Link {
                    target: "libcuda.so.1".to_string(),
                    link,
                });
            }
        }
    }
    let mut ops = Vec::new();
    if !links.is_empty() {
        ops.push(InRootOp::CreateSymlinks { links });
    }
    let mut folders: Vec<String> = Vec::new();
    for f in &host.files {
        let name = f.path.rsplit('/').next().unwrap_or("");
        let dir = dir_of(&f.path).to_string();
        if is_library(name) && !folders.contains(&dir) {
            folders.push(dir);
        }
    }
    if !folders.is_empty() {
        ops.push(InRootOp::UpdateLdcache { folders });
    }
    common.hooks = ops.iter().map(|o| o.to_hook(hook_path)).collect();
    CsvEdits {
        device,
        common,
        ops,
    }
}

/// Whether CSV mode serves `id`: its one device, as `0`, `all`, or a CDI name of `kinds` for
/// either.
pub fn csv_serves(id: &DeviceId, kinds: &[&str]) -> bool {
    match id {
        DeviceId::All | DeviceId::Index(0) => true,
        DeviceId::Cdi(q) => {
            kinds.contains(&q.kind().as_str()) && (q.name == "0" || q.name == "all")
        }
        _ => false,
    }
}

/// CSV mode's spec: device `0` and, with `all_device`, `all`, each holding the `dev` nodes;
/// the rest as common edits.
pub fn build_csv_spec(
    edits: &CsvEdits,
    vendor: &str,
    class: &str,
    all_device: bool,
) -> Result<Spec, SpecError> {
    let kind = format!("{vendor}/{class}");
    gpuctk_cdi::names::parse_qualified_name(&format!("{kind}=all"))
        .map_err(|e| SpecError::BadKind(format!("--vendor/--class {kind:?}: {e}")))?;
    if edits.device.device_nodes.is_empty() {
        return Err(SpecError::Empty(
            "none of the CSV files' `dev` entries exists under the dev root (check --dev-root and --csv.file)".to_string(),
        ));
    }
    let mut devices = vec![Device {
        name: "0".to_string(),
        annotations: BTreeMap::new(),
        container_edits: edits.device.clone(),
    }];
    if all_device {
        devices.push(Device {
            name: "all".to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits.device.clone(),
        });
    }
    let mut spec = Spec {
        cdi_version: String::new(),
        kind,
        annotations: BTreeMap::new(),
        devices,
        container_edits: edits.common.clone(),
    };
    spec.cdi_version = gpuctk_cdi::version::minimum_version(&spec).to_string();
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_host::csv::{CsvLink, CsvMount};
    use gpuctk_host::DeviceNode;

    fn host() -> CsvHost {
        CsvHost {
            devices: vec![DeviceNode {
                path: "/dev/nvmap".into(),
                host_path: "/h/dev/nvmap".into(),
                major: 10,
                minor: 120,
                mode: 0o666,
                gid: 0,
            }],
            dirs: vec![CsvMount {
                host_path: "/h/usr/local/cuda".into(),
                path: "/usr/local/cuda".into(),
            }],
            files: vec![
                CsvMount {
                    host_path: "/h/usr/lib/t/libcuda.so.1.1".into(),
                    path: "/usr/lib/t/libcuda.so.1.1".into(),
                },
                CsvMount {
                    host_path: "/h/etc/x.json".into(),
                    path: "/etc/x.json".into(),
                },
            ],
            links: vec![CsvLink {
                target: "t/libcuda.so".into(),
                link: "/usr/lib/libcuda.so".into(),
            }],
        }
    }

    #[test]
    fn edits_as_nvidia_lays_them_out() {
        let e = csv_edits(&host(), "/usr/bin/nvidia-cdi-hook");
        assert_eq!(e.device.device_nodes.len(), 1);
        assert_eq!(e.device.device_nodes[0].major, Some(10));
        let mounts: Vec<&str> = e
            .common
            .mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                "/usr/local/cuda",
                "/usr/lib/t/libcuda.so.1.1",
                "/etc/x.json"
            ]
        );
        assert_eq!(
            e.ops,
            vec![
                InRootOp::CreateSymlinks {
                    links: vec![
                        Link {
                            target: "t/libcuda.so".into(),
                            link: "/usr/lib/libcuda.so".into()
                        },
                        Link {
                            target: "libcuda.so.1".into(),
                            link: "/usr/lib/t/libcuda.so".into()
                        },
                    ]
                },
                InRootOp::UpdateLdcache {
                    folders: vec!["/usr/lib/t".into()]
                },
            ]
        );
        assert_eq!(e.common.hooks.len(), 2);
        let spec = build_csv_spec(&e, "nvidia.com", "gpu", true).unwrap();
        let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["0", "all"]);
        assert!(gpuctk_cdi::validate::validate(&spec).is_empty());
        let none = csv_edits(&CsvHost::default(), "/h");
        assert!(build_csv_spec(&none, "nvidia.com", "gpu", true).is_err());
    }

    #[test]
    fn serves_its_one_device() {
        let k = ["nvidia.com/gpu"];
        assert!(csv_serves(&DeviceId::All, &k));
        assert!(csv_serves(&DeviceId::Index(0), &k));
        assert!(!csv_serves(&DeviceId::Index(1), &k));
        assert!(csv_serves(
            &DeviceId::Cdi("nvidia.com/gpu=all".parse().unwrap()),
            &k
        ));
        assert!(!csv_serves(
            &DeviceId::Cdi("other.com/gpu=all".parse().unwrap()),
            &k
        ));
        assert!(!csv_serves(&DeviceId::Uuid("GPU-1".into()), &k));
    }
}
