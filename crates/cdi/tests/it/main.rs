//! Integration tests of gpuctk-cdi, one binary (faster to build than one per file).

/// Applying edits to a real `runc spec` config, checked against the OCI schema.
mod apply;
/// Schema testdata, the published CDI JSON schema and NVIDIA's reference spec.
mod conformance;
/// Truncated and mutated specs never panic, and what parses round-trips.
mod fuzz;
/// Registry priority, conflicts and broken files.
mod registry;
/// Atomic, path-naming spec writes.
mod write;

use std::path::PathBuf;

/// A file under `tests/`.
pub fn test_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel)
}

/// Read a file under `tests/` as a string.
pub fn read_test_file(rel: &str) -> String {
    std::fs::read_to_string(test_file(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Compile a schema from a directory of files that refer to each other by relative name.
/// `draft` applies to files that do not name their own `$schema`.
pub fn compile_schema(
    dir: &str,
    files: &[&str],
    entry: &str,
    draft: boon::Draft,
) -> (boon::Schemas, boon::SchemaIndex) {
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(draft);
    for f in files {
        // The published OCI defs.json has one `"$ref": "#definitions/uint32"` (no slash), which
        // Go's validator tolerates and boon rightly does not; fix it here, not in the copy.
        let text = read_test_file(&format!("{dir}/{f}"))
            .replace("\"$ref\": \"#definitions/", "\"$ref\": \"#/definitions/");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        compiler
            .add_resource(&format!("file:///{dir}/{f}"), v)
            .unwrap();
    }
    let mut schemas = boon::Schemas::new();
    let idx = compiler
        .compile(&format!("file:///{dir}/{entry}"), &mut schemas)
        .unwrap_or_else(|e| panic!("compile {entry}: {e:#}"));
    (schemas, idx)
}

/// The reference spec with `HOSTROOT` made absolute, as on a real host.
pub fn reference_spec_text() -> String {
    read_test_file("data/nvidia-ctk-cdi-generate.yaml").replace("HOSTROOT", "/hostroot")
}
