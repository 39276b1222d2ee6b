//! `runtime configure --config-mode oci-hook`: the OCI hook file that podman (and CRI-O) read
//! from a hooks directory, so that every container runs our legacy prestart hook, which injects
//! only into containers that ask for GPUs. NVIDIA still writes it for podman hosts without CDI;
//! its layout is NVIDIA's (`pkg/config/ocihook`): `version`, `hook` (path, args, a `PATH` env),
//! `when` (always, every command) and `stages` (`prestart`).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::Edit;

/// NVIDIA's default `--oci-hook-path`.
pub const DEFAULT_PATH: &str = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json";
/// NVIDIA's default `--nvidia-runtime-hook-path`.
pub const DEFAULT_HOOK: &str = "/usr/bin/nvidia-container-runtime-hook";
/// The names of a prestart hook that is ours or NVIDIA's to replace or remove.
const HOOK_NAMES: [&str; 2] = ["nvidia-container-runtime-hook", "nvidia-container-toolkit"];

/// A hook file that cannot be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum OciHookError {
    /// The hook path is not absolute: podman execs it as written.
    #[error(
        "--nvidia-runtime-hook-path {0:?}: give an absolute path (podman execs it as written)"
    )]
    NotAbsolute(String),
    /// A file of someone else's is at the hook file's path.
    #[error("{}: holds a hook that is not NVIDIA's prestart hook ({why}); nothing was written (move it away or pick another --oci-hook-path)", path.display())]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// What it is.
        why: String,
    },
}

/// The hook file's bytes for `hook_path` (2-space indented JSON, as NVIDIA writes it).
pub fn content(hook_path: &str) -> Vec<u8> {
    let dir = Path::new(hook_path)
        .parent()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The `PATH` the hook gets: the standard directories, plus the hook's own when it is elsewhere.
    let mut dirs: Vec<&str> = gpuctk_host::catalog::STANDARD_PATH.to_vec();
    if !dir.is_empty() && !dirs.contains(&dir.as_str()) {
        dirs.push(&dir);
    }
    let base = Path::new(hook_path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| hook_path.to_string());
    let v = json!({
        "version": "1.0.0",
        "hook": {
            "path": hook_path,
            "args": [base, "prestart"],
            "env": [format!("PATH={}", dirs.join(":"))],
        },
        "when": {"always": true, "commands": [".*"]},
        "stages": ["prestart"],
    });
    let mut out = serde_json::to_vec_pretty(&v).expect("a JSON value serializes");
    out.push(b'\n');
    out
}

/// Why `bytes` is not a hook file of NVIDIA's prestart hook, if it is not.
fn not_ours(bytes: &[u8]) -> Option<String> {
    let v: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Some(format!("not JSON: {e}")),
    };
    let path = v
        .pointer("/hook/path")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if HOOK_NAMES.contains(&name.as_str()) {
        None
    } else {
        Some(format!("its hook is {path:?}"))
    }
}

/// The edit writing the hook file at `path` (`current`: what is there now).
pub fn configure(
    path: &Path,
    current: Option<&[u8]>,
    hook_path: &str,
) -> Result<Edit, OciHookError> {
    if !hook_path.starts_with('/') {
        return Err(OciHookError::NotAbsolute(hook_path.to_string()));
    }
    if let Some(why) = current.and_then(not_ours) {
        return Err(OciHookError::NotOurs {
            path: path.to_path_buf(),
            why,
        });
    }
    let mut e = Edit::write(
        path.to_path_buf(),
        current.map(<[u8]>::to_vec),
        content(hook_path),
    );
    // The hooks directory loads `*.json` only: `<file>.bak` next to it is never loaded.
    e.ours = current.is_some_and(|c| c == e.after.as_slice());
    Ok(e)
}

/// The edit removing the hook file at `path`, when it is NVIDIA's prestart hook's; `None` when
/// there is nothing of ours to remove.
pub fn unconfigure(path: &Path, current: Option<&[u8]>) -> Result<Option<Edit>, OciHookError> {
    let Some(current) = current else {
        return Ok(None);
    };
    if let Some(why) = not_ours(current) {
        return Err(OciHookError::NotOurs {
            path: path.to_path_buf(),
            why,
        });
    }
    let mut e = Edit::remove(path.to_path_buf(), Some(current.to_vec()));
    e.ours = true;
    Ok(Some(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_layout() {
        let v: Value = serde_json::from_slice(&content(DEFAULT_HOOK)).unwrap();
        assert_eq!(v["version"], "1.0.0");
        assert_eq!(v["hook"]["path"], DEFAULT_HOOK);
        assert_eq!(
            v["hook"]["args"],
            json!(["nvidia-container-runtime-hook", "prestart"])
        );
        assert_eq!(
            v["hook"]["env"],
            json!(["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
        );
        assert_eq!(v["when"], json!({"always": true, "commands": [".*"]}));
        assert_eq!(v["stages"], json!(["prestart"]));
        let v: Value =
            serde_json::from_slice(&content("/opt/gpuctk/nvidia-container-runtime-hook")).unwrap();
        assert!(v["hook"]["env"][0]
            .as_str()
            .unwrap()
            .ends_with(":/bin:/opt/gpuctk"));
    }

    #[test]
    fn only_nvidia_hook_files_are_replaced_or_removed() {
        let p = Path::new("/h/oci-nvidia-hook.json");
        assert!(configure(p, None, "bin/hook").is_err());
        let e = configure(p, None, DEFAULT_HOOK).unwrap();
        assert!(!e.is_noop() && !e.ours);
        let again = configure(p, Some(&e.after), DEFAULT_HOOK).unwrap();
        assert!(again.is_noop());
        let other = br#"{"hook":{"path":"/usr/bin/other"}}"#;
        let msg = configure(p, Some(other), DEFAULT_HOOK)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("/usr/bin/other") && msg.contains("nothing was written"),
            "{msg}"
        );
        assert!(unconfigure(p, Some(other)).is_err());
        assert!(unconfigure(p, None).unwrap().is_none());
        let rm = unconfigure(p, Some(&e.after)).unwrap().unwrap();
        assert!(rm.delete);
    }
}
