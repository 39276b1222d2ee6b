//! gpuctk-container: the work done inside a container's root filesystem by
//! the OCI `createContainer` hooks our CDI specs declare
//! (`nvidia-cdi-hook update-ldcache | create-symlinks | chmod |
//! enable-cuda-compat`).
//!
//! * [`state`]: the OCI state on a hook's stdin and where the root is;
//! * [`root`]: [`Root`], file access resolved inside the root with
//!   `openat2(RESOLVE_IN_ROOT)`, so that no symlink in the image reaches
//!   the host;
//! * [`elf`]: a bounded ELF reader (soname, ABI, note sections);
//! * [`hooks`]: the hooks themselves;
//! * [`ops`]: one typed in-root operation run on a root, for every delivery;
//! * [`guard`]: the driver's params and application profile as the container sees them;
//! * [`sized`]: the one whole-file read of a regular file whose size `fstat` gave;
//! * `sys`: every system call, as a safe function; the only module allowed `unsafe`.
//!
//! Nothing here executes anything from the image or reads the environment.

#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod elf;
pub mod guard;
pub mod hooks;
pub mod legacy;
pub mod ops;
pub mod root;
pub mod sized;
pub mod state;
#[allow(unsafe_code)]
mod sys;

#[cfg(test)]
mod arch_numbers;

pub use hooks::{
    chmod, create_symlinks, enable_cuda_compat, update_ldcache, CompatOutcome, HookError,
    LdcacheReport, Link,
};
pub use root::{FileKind, LinkOutcome, Metadata, Root, RootError};
pub use state::{container_root, State, StateError};
