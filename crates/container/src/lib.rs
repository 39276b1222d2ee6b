//! placeholder, replaced by the crate implementation
