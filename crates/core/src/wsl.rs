//! WSL2 mode's edits, from the host's `/dev/dxg` and driver store
//! ([`gpuctk_host::wsl::WslHost`]): pure, so `cdi generate --mode wsl` and the shim on a WSL
//! host cannot disagree.
//!
//! As NVIDIA's `pkg/nvcdi/lib-wsl.go` and `driver-wsl.go` build them: one device, `all`, holding
//! `/dev/dxg`; the common edits mount `libdxcore.so` and the store's files where the host has
//! them (the store folder is used unchanged), link `/usr/bin/nvidia-smi` to the store's
//! `nvidia-smi` (`create-symlinks`), and add the store folder and `/usr/lib/wsl/lib` to the
//! container's ld.so.cache (`update-ldcache`).

use std::collections::BTreeMap;

use gpuctk_cdi::spec::{ContainerEdits, Device, Mount, Spec};
use gpuctk_host::wsl::WslHost;

use crate::ops::{InRootOp, Link};
use crate::plan::{cdi_node, FILE_MOUNT_OPTIONS};
use crate::request::DeviceId;
use crate::spec::SpecError;

/// Where the nvidia-smi link goes in the container.
pub const NVIDIA_SMI_LINK: &str = "/usr/bin/nvidia-smi";

/// The edits of WSL mode: the device's (`/dev/dxg`) and the common ones, with the common
/// hooks' typed operations in order.
#[derive(Debug, Clone, PartialEq)]
pub struct WslEdits {
    /// `/dev/dxg`.
    pub device: ContainerEdits,
    /// Mounts and hooks every container of the device gets.
    pub common: ContainerEdits,
    /// `common.hooks`, typed.
    pub ops: Vec<InRootOp>,
}

/// Whether a file name is a library's, as NVIDIA's ldcache hook tells (`lib?*.so*`, the part
/// after the last `.so` empty or a version).
fn is_library(name: &str) -> bool {
    if !name.starts_with("lib") || name.len() < 4 {
        return false;
    }
    match name.rfind(".so") {
        Some(i) if i > 3 => {
            let rest = &name[i + 3..];
            rest.is_empty() || rest.starts_with('.')
        }
        _ => false,
    }
}

fn dir_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((d, _)) => d,
    }
}

/// Plan WSL mode's edits for `host`; `hook_path` is the hook binary written into hooks.
pub fn wsl_edits(host: &WslHost, hook_path: &str) -> WslEdits {
    let device = ContainerEdits {
        device_nodes: vec![cdi_node(&host.dxg)],
        ..Default::default()
    };
    let mut common = ContainerEdits::default();
    for f in host.files() {
        common.mounts.push(Mount {
            host_path: f.host_path.to_string_lossy().into_owned(),
            container_path: f.path.clone(),
            r#type: None,
            options: FILE_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
        });
    }
    let mut ops = Vec::new();
    // The store is used unchanged, so nvidia-smi is not on PATH without the link.
    if let Some(smi) = host
        .required
        .iter()
        .find(|f| f.path.rsplit('/').next() == Some("nvidia-smi"))
    {
        ops.push(InRootOp::CreateSymlinks {
            links: vec![Link {
                target: smi.path.clone(),
                link: NVIDIA_SMI_LINK.to_string(),
            }],
        });
    }
    let mut folders: Vec<String> = Vec::new();
    for f in host.required.iter().chain(host.dxcore.iter()) {
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
    WslEdits {
        device,
        common,
        ops,
    }
}

/// Whether WSL mode serves `id`: its one device, `all` (NVIDIA's only id there), also as the
/// index `0` a runtime request may name, or a CDI name of `kinds` for either.
pub fn wsl_serves(id: &DeviceId, kinds: &[&str]) -> bool {
    match id {
        DeviceId::All | DeviceId::Index(0) => true,
        DeviceId::Cdi(q) => {
            kinds.contains(&q.kind().as_str()) && (q.name == "0" || q.name == "all")
        }
        _ => false,
    }
}

/// WSL mode's spec: the one device `all` holding `/dev/dxg`; the rest as common edits.
pub fn build_wsl_spec(edits: &WslEdits, vendor: &str, class: &str) -> Result<Spec, SpecError> {
    let kind = format!("{vendor}/{class}");
    gpuctk_cdi::names::parse_qualified_name(&format!("{kind}=all"))
        .map_err(|e| SpecError::BadKind(format!("--vendor/--class {kind:?}: {e}")))?;
    let mut spec = Spec {
        cdi_version: String::new(),
        kind,
        annotations: BTreeMap::new(),
        devices: vec![Device {
            name: "all".to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits.device.clone(),
        }],
        container_edits: edits.common.clone(),
    };
    spec.cdi_version = gpuctk_cdi::version::minimum_version(&spec).to_string();
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_host::wsl::WslFile;
    use gpuctk_host::DeviceNode;

    const S: &str = "/usr/lib/wsl/drivers/nv.inf_amd64_1";

    fn file(path: &str) -> WslFile {
        WslFile {
            host_path: format!("/h{path}").into(),
            path: path.to_string(),
        }
    }

    fn host() -> WslHost {
        WslHost {
            dxg: DeviceNode {
                path: "/dev/dxg".into(),
                host_path: "/h/dev/dxg".into(),
                major: 10,
                minor: 61,
                mode: 0o666,
                gid: 0,
            },
            store: S.into(),
            dxcore: Some(file("/usr/lib/wsl/lib/libdxcore.so")),
            required: vec![
                file(&format!("{S}/libcuda.so.1.1")),
                file(&format!("{S}/nvcubins.bin")),
                file(&format!("{S}/nvidia-smi")),
            ],
            additional: vec![file(&format!("{S}/nvxdapix.dll"))],
        }
    }

    #[test]
    fn edits_as_nvidia_lays_them_out() {
        let e = wsl_edits(&host(), "/usr/bin/nvidia-cdi-hook");
        assert_eq!(e.device.device_nodes.len(), 1);
        assert_eq!(e.device.device_nodes[0].path, "/dev/dxg");
        let mounts: Vec<&str> = e
            .common
            .mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[0], "/usr/lib/wsl/lib/libdxcore.so");
        assert_eq!(
            e.ops,
            vec![
                InRootOp::CreateSymlinks {
                    links: vec![Link {
                        target: format!("{S}/nvidia-smi"),
                        link: "/usr/bin/nvidia-smi".into()
                    }]
                },
                InRootOp::UpdateLdcache {
                    folders: vec![S.into(), "/usr/lib/wsl/lib".into()]
                },
            ]
        );
        let spec = build_wsl_spec(&e, "nvidia.com", "gpu").unwrap();
        assert_eq!(spec.devices.len(), 1);
        assert_eq!(spec.devices[0].name, "all");
        assert!(gpuctk_cdi::validate::validate(&spec).is_empty());
        assert!(build_wsl_spec(&e, "bad vendor", "gpu").is_err());
    }

    #[test]
    fn library_names_as_nvidia_tells_them() {
        for (name, want) in [
            ("libcuda.so.1.1", true),
            ("libdxcore.so", true),
            ("libcuda_loader.so", true),
            ("nvcubins.bin", false),
            ("nvidia-smi", false),
            ("lib.so", false),
            ("libx.sox", false),
        ] {
            assert_eq!(is_library(name), want, "{name}");
        }
    }

    #[test]
    fn serves_its_one_device() {
        let k = ["nvidia.com/gpu"];
        assert!(wsl_serves(&DeviceId::All, &k));
        assert!(wsl_serves(&DeviceId::Index(0), &k));
        assert!(!wsl_serves(&DeviceId::Index(1), &k));
        assert!(wsl_serves(
            &DeviceId::Cdi("nvidia.com/gpu=all".parse().unwrap()),
            &k
        ));
        assert!(!wsl_serves(&DeviceId::Uuid("GPU-1".into()), &k));
    }
}
