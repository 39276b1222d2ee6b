//! The policy core: from what the host has (`Inventory`) and what is asked for, to CDI container
//! edits. Pure: no IO, no clock, no environment.
#![deny(missing_docs)]

pub mod capabilities;
pub mod plan;
pub mod spec;

pub use capabilities::CapabilitySet;
pub use plan::{plan, GpuEdits, Plan, PlanOptions};
pub use spec::{build_spec, NameStrategy, SpecError, SpecOptions};
