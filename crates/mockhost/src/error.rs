//! The crate's single error type. Every message names the path or program
//! involved and, where there is one, the fix.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while building a mock host or rootfs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem or process operation failed.
    #[error("{op} {}: {}{}", path.display(), os_reason(source), hint_suffix(hint))]
    Io {
        /// What was being done ("mknod", "write", ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
        /// What to do about it; empty when there is nothing specific.
        hint: &'static str,
    },
    /// A configuration value is out of range or malformed.
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidConfig {
        /// Which setting.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// Why, and what is accepted.
        reason: String,
    },
    /// The target directory already has content.
    #[error("{} is not empty: give a directory that is absent or empty", path.display())]
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// The target path exists and is not a directory.
    #[error("{} exists and is not a directory", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A layout name that is not one of the known ones.
    #[error("unknown layout {value:?}: valid values are debian, rhel, driver-container")]
    UnknownLayout {
        /// The rejected name.
        value: String,
    },
    /// An architecture name that is not one of the known ones.
    #[error("unknown architecture {value:?}: valid values are amd64 (x86_64) and arm64 (aarch64)")]
    UnknownArch {
        /// The rejected name.
        value: String,
    },
    /// The other architecture's fake driver was not compiled into this build.
    #[error("this build has no {arch} driver files: build it with that architecture's cross compiler installed (apt-get install gcc-aarch64-linux-gnu, or set CC_FOREIGN)")]
    ArchNotBuilt {
        /// The architecture asked for.
        arch: crate::Arch,
    },
    /// An external program could not be found.
    #[error("{tool} not found (tried {tried}): {hint}")]
    ToolNotFound {
        /// Program name.
        tool: String,
        /// The locations looked at.
        tried: String,
        /// How to install it.
        hint: &'static str,
    },
    /// An external program ran and failed.
    #[error("{} {args} failed ({status}): {stderr}", program.display())]
    ToolFailed {
        /// The program.
        program: PathBuf,
        /// Its arguments, space separated.
        args: String,
        /// Exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// ldconfig ran but did not produce what it should have.
    #[error("{} -r {}: {what}", ldconfig.display(), root.display())]
    LdconfigIncomplete {
        /// The ldconfig used.
        ldconfig: PathBuf,
        /// The root it was run on.
        root: PathBuf,
        /// What is missing.
        what: String,
    },
    /// The configured busybox does not exist.
    #[error("busybox not found at {}: apt-get install busybox-static", path.display())]
    BusyboxNotFound {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The configured busybox is dynamically linked and would not run in the rootfs.
    #[error("busybox at {} is dynamically linked (PT_INTERP {interp}); a static one is needed: apt-get install busybox-static", path.display())]
    BusyboxNotStatic {
        /// The busybox binary.
        path: PathBuf,
        /// Its program interpreter.
        interp: String,
    },
    /// busybox lacks an applet the rootfs needs.
    #[error("busybox at {} has no {applet:?} applet; use a full busybox-static build", path.display())]
    BusyboxApplet {
        /// The busybox binary.
        path: PathBuf,
        /// The missing applet.
        applet: String,
    },
    /// A host library needed in the rootfs could not be found.
    #[error("host library {name} not found in {tried}: apt-get install libc6")]
    HostLibraryNotFound {
        /// Library file name (soname).
        name: String,
        /// Directories searched.
        tried: String,
    },
    /// An ELF file could not be understood.
    #[error("ELF {what}: {source}")]
    Elf {
        /// The file or artifact.
        what: String,
        /// What is wrong with it.
        source: gpuctk_elf::Error,
    },
    /// The probe artifact has no `PT_INTERP`, so the loader to copy into the rootfs is unknown.
    #[error("ELF {what}: no PT_INTERP; expected a dynamically linked executable")]
    NotDynamic {
        /// The artifact.
        what: String,
    },
    /// Patching the per-host config block or soname into an artifact failed.
    #[error("patching {artifact}: {source}")]
    Patch {
        /// The embedded artifact.
        artifact: String,
        /// What went wrong.
        source: crate::PatchError,
    },
    /// mock-host.json could not be written or read.
    #[error("{op} {}: {source}", path.display())]
    Json {
        /// "serialize" or "parse".
        op: &'static str,
        /// The JSON file.
        path: PathBuf,
        /// The serde error.
        source: serde_json::Error,
    },
    /// No dynamic char-device major is free for nvidia-uvm.
    #[error("no free character-device major in 234..=511 for nvidia-uvm (all listed in {})", path.display())]
    NoFreeMajor {
        /// The /proc/devices consulted.
        path: PathBuf,
    },
}

/// The OS's description without std's " (os error N)" suffix.
fn os_reason(e: &io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

fn hint_suffix(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!(" ({hint})")
    }
}

/// Shorthand for building [`Error::Io`] in `map_err`.
pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
    hint: &'static str,
) -> impl FnOnce(io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io {
        op,
        path,
        source,
        hint,
    }
}
