//! The Container Device Interface (CDI) for gpuctk: the spec model with strict parsing and
//! validation, spec versions, qualified device names, the registry over spec directories, spec
//! writing, and applying container edits to an OCI `config.json`.
//!
//! Everything that parses is pure (bytes in, value or error out) and never panics on any input;
//! IO is confined to [`spec::Spec::load`], [`spec::write_spec`], [`registry::Registry::load`] (and
//! its listing, [`registry::list_spec_dir`]) and the host `stat` in [`apply::fill_from_host`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod apply;
pub mod limits;
pub mod names;
pub mod registry;
pub mod spec;
pub mod transform;
pub mod validate;
pub mod version;
mod yaml_out;

pub use apply::{apply_edits, apply_edits_in_place, fill_from_host, ApplyError};
pub use names::{is_qualified_name, parse_qualified_name, LabelError, NameError, QualifiedName};
pub use registry::{Registry, ResolveError, Resolved, DEFAULT_SPEC_DIRS};
pub use spec::{
    write_spec, ContainerEdits, Device, DeviceNode, Error, Format, Hook, IntelRdt, Mount,
    NetDevice, ParseError, Spec,
};
pub use validate::{validate, Issue, ValidationError};
pub use version::{minimum_version, Version, LATEST};
