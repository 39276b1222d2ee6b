//! The policy core: from what the host has (`Inventory`) and what the container asks for
//! (`Request`), to CDI container edits. Pure: no IO, no clock, no environment.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod capabilities;
pub mod decide;
pub mod gated;
pub mod mig;
pub mod ops;
pub mod plan;
pub mod platform;
pub mod request;
pub mod require;
pub mod route;
pub mod select;
pub mod spec;
pub mod verdict;
pub mod wsl;

pub use capabilities::CapabilitySet;
pub use decide::{decide, DecideError, Decision, HostView, Injection, Origin, Settings};
pub use ops::{InRootOp, Link, OpError};
pub use plan::{plan, GpuEdits, Plan, PlanOptions};
pub use request::{
    gate, parse_request, Delivery, DeviceId, Devices, Grant, Policy, Request, RequestError, Sources,
};
pub use require::{check as check_requirements, DeviceFacts, Facts, RequireError, Version};
pub use route::{route, stale_reason, Mode, Route, RouteError};
pub use select::{cdi_name_to_device, select_gpus, SelectError};
pub use spec::{
    build_management_spec, build_spec, spec_driver_version, NameStrategy, SpecError, SpecOptions,
    DRIVER_VERSION_ANNOTATION,
};
pub use verdict::{judge_cuda_start, CompatLibrary, CudaVerdict};
