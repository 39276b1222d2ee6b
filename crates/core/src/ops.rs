//! The in-root operations a GPU container needs after its mounts (links next to the libraries,
//! the CUDA forward-compat decision, the loader cache, modes of device nodes), as a typed value.
//!
//! [`plan`](crate::plan()) emits them; [`InRootOp::to_hook`] is the one encoder into
//! `nvidia-cdi-hook` arguments (NVIDIA's subcommands and flags) for CDI specs; the hook's
//! command line is the one decoder. A delivery that can work on the root itself (the shim, the
//! legacy hook) takes the typed value and runs no hook process.

use std::fmt;

use gpuctk_cdi::spec::Hook;

/// Where an image keeps its CUDA forward-compat libraries, NVIDIA's default.
pub const DEFAULT_COMPAT_ROOT: &str = "/usr/local/cuda/compat";
/// The loader's cache, written by `update-ldcache`.
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";
/// The loader's main configuration.
pub const LD_SO_CONF: &str = "/etc/ld.so.conf";
/// The loader's configuration directory.
pub const LD_SO_CONF_D: &str = "/etc/ld.so.conf.d";
/// The env every hook gets: fixed, so nothing from the image reaches a host process.
pub const HOOK_ENV: &[&str] = &["NVIDIA_CTK_DEBUG=false"];
/// The `timeout` of every hook we write, in seconds: the runtime kills a hook that takes longer
/// and fails the container with a message, instead of hanging on a hostile image (a FUSE file, a
/// stuck NFS mount). Our hooks read capped input and take milliseconds.
pub const HOOK_TIMEOUT_SECS: i64 = 30;
/// The program name our hook entries carry in `args[0]`.
pub const HOOK_ARGV0: &str = "nvidia-cdi-hook";

/// A value given to an operation that it cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// A `--link` value is not `TARGET::LINK`.
    #[error("--link {value:?}: {reason}; expected TARGET::LINK, e.g. libcuda.so.1::/usr/lib64/libcuda.so")]
    BadLink {
        /// The value given.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A `--mode` that is not an octal permission.
    #[error("--mode {value:?}: expected an octal mode such as 755")]
    BadMode {
        /// The value given.
        value: String,
    },
}

/// One `--link TARGET::LINK`: create `link` (a container path) pointing at `target` (stored
/// verbatim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// What the link points at, e.g. `libcuda.so.1` or `/usr/lib64/x`.
    pub target: String,
    /// The container path of the link.
    pub link: String,
}

impl Link {
    /// Parses NVIDIA's `TARGET::LINK` syntax.
    pub fn parse(value: &str) -> Result<Link, OpError> {
        let bad = |reason| OpError::BadLink {
            value: value.to_string(),
            reason,
        };
        let (target, link) = value.split_once("::").ok_or_else(|| bad("no `::`"))?;
        if target.is_empty() {
            return Err(bad("the target is empty"));
        }
        if link.is_empty() {
            return Err(bad("the link is empty"));
        }
        if !link.starts_with('/') {
            return Err(bad("the link must be an absolute container path"));
        }
        if value.contains('\0') {
            return Err(bad("contains a NUL byte"));
        }
        Ok(Link {
            target: target.to_string(),
            link: link.to_string(),
        })
    }
}

impl std::str::FromStr for Link {
    type Err = OpError;
    fn from_str(s: &str) -> Result<Link, OpError> {
        Link::parse(s)
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}::{}", self.target, self.link)
    }
}

/// Parses `--mode` as `chmod` takes it: octal, optionally `0o`-prefixed, at most `7777`.
pub fn parse_mode(value: &str) -> Result<u32, OpError> {
    u32::from_str_radix(value.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| OpError::BadMode {
            value: value.to_string(),
        })
}

/// One operation inside a container root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InRootOp {
    /// `create-symlinks --link T::L ...`.
    CreateSymlinks {
        /// The links, in order.
        links: Vec<Link>,
    },
    /// `enable-cuda-compat`: use the image's compat `libcuda` when it is newer and supported.
    EnableCudaCompat {
        /// `--host-driver-version`.
        host_driver_version: Option<String>,
        /// `--host-cuda-version` (Tegra).
        host_cuda_version: Option<String>,
        /// `--cuda-compat-container-root`.
        compat_root: String,
    },
    /// `update-ldcache --folder F ...`: the image's cache plus these folders.
    UpdateLdcache {
        /// Library folders inside the container.
        folders: Vec<String>,
    },
    /// `chmod --mode M --path P ...`.
    Chmod {
        /// Permission bits.
        mode: u32,
        /// Container paths.
        paths: Vec<String>,
    },
    /// `disable-device-node-modification`: the container's `/proc/driver/nvidia/params` says
    /// `ModifyDeviceFiles: 0`, so the driver inside never creates or changes device nodes. A
    /// mount over procfs, so no delivery can do it on the root before the container exists.
    DisableDeviceNodeModification {
        /// `--proc-root` (ours, hidden): where the host's procfs is, when not `/proc`.
        proc_root: Option<String>,
    },
    /// `update-application-profile`: the driver's application profile limits EGL and Vulkan
    /// to the container's GPUs (`EGLVisibleDGPUDevices`, from its `/dev/nvidiaN` nodes).
    UpdateApplicationProfile,
}

/// The host's procfs as hooks read it unless told otherwise.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// The driver's module parameters in procfs, rewritten by `disable-device-node-modification`.
pub const NVIDIA_PARAMS: &str = "/proc/driver/nvidia/params";
/// The driver's application-profile folder, written by `update-application-profile`.
pub const APP_PROFILE_DIR: &str = "/etc/nvidia/nvidia-application-profiles-rc.d";
/// The file `update-application-profile` writes there.
pub const APP_PROFILE_FILE: &str = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";

/// `--name value`, or `--name=value` when the value would read as a flag.
fn flag(out: &mut Vec<String>, name: &str, value: &str) {
    if value.starts_with('-') || value.is_empty() {
        out.push(format!("--{name}={value}"));
    } else {
        out.push(format!("--{name}"));
        out.push(value.to_string());
    }
}

impl InRootOp {
    /// The hook subcommand.
    pub fn name(&self) -> &'static str {
        match self {
            InRootOp::CreateSymlinks { .. } => "create-symlinks",
            InRootOp::EnableCudaCompat { .. } => "enable-cuda-compat",
            InRootOp::UpdateLdcache { .. } => "update-ldcache",
            InRootOp::Chmod { .. } => "chmod",
            InRootOp::DisableDeviceNodeModification { .. } => "disable-device-node-modification",
            InRootOp::UpdateApplicationProfile => "update-application-profile",
        }
    }

    /// The encoder: the hook's arguments after the program name, NVIDIA's flags.
    pub fn to_args(&self) -> Vec<String> {
        let mut out = vec![self.name().to_string()];
        match self {
            InRootOp::CreateSymlinks { links } => {
                for l in links {
                    flag(&mut out, "link", &l.to_string());
                }
            }
            InRootOp::EnableCudaCompat {
                host_driver_version,
                host_cuda_version,
                compat_root,
            } => {
                if let Some(v) = host_driver_version {
                    out.push(format!("--host-driver-version={v}"));
                }
                if let Some(v) = host_cuda_version {
                    out.push(format!("--host-cuda-version={v}"));
                }
                if compat_root != DEFAULT_COMPAT_ROOT {
                    out.push(format!("--cuda-compat-container-root={compat_root}"));
                }
            }
            InRootOp::UpdateLdcache { folders } => {
                for f in folders {
                    flag(&mut out, "folder", f);
                }
            }
            InRootOp::Chmod { mode, paths } => {
                flag(&mut out, "mode", &format!("{mode:o}"));
                for p in paths {
                    flag(&mut out, "path", p);
                }
            }
            InRootOp::DisableDeviceNodeModification { proc_root } => {
                if let Some(p) = proc_root {
                    out.push(format!("--proc-root={p}"));
                }
            }
            InRootOp::UpdateApplicationProfile => {}
        }
        out
    }

    /// The createContainer hook entry that runs this operation through `hook_path`.
    pub fn to_hook(&self, hook_path: &str) -> Hook {
        let mut args = vec![HOOK_ARGV0.to_string()];
        args.extend(self.to_args());
        Hook {
            hook_name: "createContainer".to_string(),
            path: hook_path.to_string(),
            args,
            env: HOOK_ENV.iter().map(|s| s.to_string()).collect(),
            timeout: Some(HOOK_TIMEOUT_SECS),
        }
    }

    /// The container paths this operation reads or writes through, so a delivery can tell
    /// whether a mount would hide them from it; with each, whether the operation follows a
    /// symlink at the last component (it reads a directory) or replaces the name itself (a
    /// link or file it writes).
    pub fn paths(&self) -> Vec<(String, bool)> {
        let name = |p: &str| (p.to_string(), false);
        let dir = |p: &str| (p.to_string(), true);
        match self {
            InRootOp::UpdateLdcache { folders } => {
                let mut v = vec![name(LD_SO_CACHE), name(LD_SO_CONF), dir(LD_SO_CONF_D)];
                v.extend(folders.iter().map(|f| dir(f)));
                v
            }
            InRootOp::CreateSymlinks { links } => links.iter().map(|l| name(&l.link)).collect(),
            InRootOp::EnableCudaCompat { compat_root, .. } => {
                vec![dir(compat_root), dir(LD_SO_CONF_D)]
            }
            InRootOp::Chmod { paths, .. } => paths.iter().map(|p| dir(p)).collect(),
            InRootOp::DisableDeviceNodeModification { .. } => vec![name(NVIDIA_PARAMS)],
            // Its `/dev` is the runtime's, which a delivery before `create` knows from the spec.
            InRootOp::UpdateApplicationProfile => {
                vec![dir(APP_PROFILE_DIR), name(APP_PROFILE_FILE)]
            }
        }
    }

    /// Whether the operation is a mount into the created container (over its procfs), so that a
    /// delivery working on the root before `create` cannot do it there.
    pub fn needs_live_container(&self) -> bool {
        matches!(self, InRootOp::DisableDeviceNodeModification { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_as_nvidia_writes_it() {
        let op = InRootOp::CreateSymlinks {
            links: vec![Link::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap()],
        };
        assert_eq!(
            op.to_args(),
            [
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib64/libcuda.so"
            ]
        );
        let op = InRootOp::EnableCudaCompat {
            host_driver_version: Some("570.124.06".into()),
            host_cuda_version: None,
            compat_root: DEFAULT_COMPAT_ROOT.into(),
        };
        assert_eq!(
            op.to_args(),
            ["enable-cuda-compat", "--host-driver-version=570.124.06"]
        );
        let op = InRootOp::Chmod {
            mode: 0o755,
            paths: vec!["/dev/dri".into()],
        };
        assert_eq!(
            op.to_args(),
            ["chmod", "--mode", "755", "--path", "/dev/dri"]
        );
        let op = InRootOp::UpdateLdcache {
            folders: vec!["-odd".into()],
        };
        assert_eq!(op.to_args(), ["update-ldcache", "--folder=-odd"]);
        let h = op.to_hook("/usr/bin/nvidia-cdi-hook");
        assert_eq!(h.args[0], HOOK_ARGV0);
        assert_eq!(h.timeout, Some(HOOK_TIMEOUT_SECS));
    }

    #[test]
    fn link_and_mode_errors_name_the_value() {
        for bad in ["nolink", "::/x", "target::", "target::relative"] {
            let msg = Link::parse(bad).unwrap_err().to_string();
            assert!(msg.contains(bad) && msg.contains("TARGET::LINK"), "{msg}");
        }
        assert_eq!(parse_mode("0o755"), Ok(0o755));
        assert!(parse_mode("99").is_err());
        assert!(parse_mode("17777").is_err());
    }
}
