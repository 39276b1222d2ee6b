//! WSL2 mode's edits, from the host's `/dev/dxg` and driver store
//! ([`gpuctk_host::wsl::WslHost`]): pure, so `cdi generate --mode wsl` and the shim on a WSL
//! host cannot disagree.
//!
//! As NVIDIA's `pkg/nvcdi/lib-wsl.go` and `driver-wsl.go` build them: one device, `all`, holding
//! `/dev/dxg`; the common edits mount `libdxcore.so` and the store's files where the host has
//! them (the store folder is used unchanged), link `/usr/bin/nvidia-smi` to the store's
//! `nvidia-smi` (`create-symlinks`), and add the store folder and `/usr/lib/wsl/lib` to the
//! container's ld.so.cache (`update-ldcache`).

use gpuctk_cdi::spec::Spec;
use gpuctk_host::wsl::WslHost;

use crate::ops::Link;
use crate::platform::{library_folders, platform_edits, platform_spec, PlatformEdits};
use crate::spec::{spec_kind, SpecError};

/// Where the nvidia-smi link goes in the container.
pub const NVIDIA_SMI_LINK: &str = "/usr/bin/nvidia-smi";

/// Plan WSL mode's edits for `host` (its device holds `/dev/dxg`); `hook_path` is the hook
/// binary written into hooks.
pub fn wsl_edits(host: &WslHost, hook_path: &str) -> PlatformEdits {
    // The store is used unchanged, so nvidia-smi is not on PATH without the link.
    let links = host
        .required
        .iter()
        .find(|f| f.path.rsplit('/').next() == Some("nvidia-smi"))
        .map(|smi| Link {
            target: smi.path.clone(),
            link: NVIDIA_SMI_LINK.to_string(),
        })
        .into_iter()
        .collect();
    let folders = library_folders(
        host.required
            .iter()
            .chain(host.dxcore.iter())
            .map(|f| f.path.as_str()),
    );
    let mounts = host
        .files()
        .map(|f| (f.host_path.as_path(), f.path.as_str()));
    platform_edits([&host.dxg], mounts, links, folders, hook_path)
}

/// WSL mode's spec: the one device `all` holding `/dev/dxg`; the rest as common edits.
pub fn build_wsl_spec(edits: &PlatformEdits, vendor: &str, class: &str) -> Result<Spec, SpecError> {
    Ok(platform_spec(spec_kind(vendor, class)?, edits, &["all"]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::InRootOp;
    use crate::request::DeviceId;
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
    fn serves_its_one_device() {
        let k = ["nvidia.com/gpu"];
        assert!(crate::platform::serves_one_device(&DeviceId::All, &k));
        assert!(crate::platform::serves_one_device(&DeviceId::Index(0), &k));
        assert!(!crate::platform::serves_one_device(&DeviceId::Index(1), &k));
        assert!(crate::platform::serves_one_device(
            &DeviceId::Cdi("nvidia.com/gpu=all".parse().unwrap()),
            &k
        ));
        assert!(!crate::platform::serves_one_device(
            &DeviceId::Uuid("GPU-1".into()),
            &k
        ));
    }
}
