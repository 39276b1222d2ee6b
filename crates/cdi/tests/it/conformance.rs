use gpuctk_cdi::spec::*;
use gpuctk_cdi::version::{self, minimum_version};
use gpuctk_cdi::{validate, Format};

use crate::{compile_schema, read_test_file, reference_spec_text, test_file};

fn cdi_schema() -> (boon::Schemas, boon::SchemaIndex) {
    compile_schema(
        "schema",
        &["schema.json", "defs.json"],
        "schema.json",
        boon::Draft::V7,
    )
}

fn schema_check(v: &serde_json::Value) -> Result<(), String> {
    let (schemas, idx) = cdi_schema();
    schemas.validate(v, idx).map_err(|e| format!("{e:#}"))
}

#[test]
fn schema_testdata_good_parses_and_validates() {
    let dir = test_file("schema/testdata/good");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let spec = Spec::load(&p).unwrap_or_else(|e| panic!("{e}"));
        let issues = validate(&spec);
        assert!(issues.is_empty(), "{}: {issues:?}", p.display());
        Spec::load_valid(&p).unwrap();
        n += 1;
    }
    assert!(n >= 2);
}

#[test]
fn schema_testdata_bad_is_rejected() {
    let dir = test_file("schema/testdata/bad");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let err = Spec::load_valid(&p).unwrap_err().to_string();
        assert!(err.starts_with(&p.display().to_string()), "{err}");
        n += 1;
    }
    assert!(n >= 2);
}

fn full_spec() -> Spec {
    Spec {
        cdi_version: version::LATEST.to_string(),
        kind: "example.com/dev.sub".into(),
        annotations: [("example.com/owner".to_string(), "team".to_string())].into(),
        devices: vec![Device {
            name: "0".into(),
            annotations: [("note".to_string(), "x".to_string())].into(),
            container_edits: ContainerEdits {
                env: vec!["A=1".into()],
                device_nodes: vec![DeviceNode {
                    path: "/dev/x0".into(),
                    host_path: Some("/host/dev/x0".into()),
                    r#type: Some("c".into()),
                    major: Some(240),
                    minor: Some(0),
                    file_mode: Some(0o666),
                    permissions: Some("rw".into()),
                    uid: Some(0),
                    gid: Some(44),
                }],
                net_devices: vec![NetDevice {
                    host_interface_name: "eth7".into(),
                    name: "net0".into(),
                }],
                ..Default::default()
            },
        }],
        container_edits: ContainerEdits {
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: "/usr/bin/hook".into(),
                args: vec!["hook".into(), "run".into()],
                env: vec!["DEBUG=0".into()],
                timeout: Some(10),
            }],
            mounts: vec![Mount {
                host_path: "/usr/lib/libx.so.1".into(),
                container_path: "/usr/lib/libx.so.1".into(),
                options: vec!["ro".into(), "rbind".into()],
                r#type: Some("bind".into()),
            }],
            intel_rdt: Some(IntelRdt {
                clos_id: Some("grp".into()),
                schemata: Some(vec!["L3:0=ff".into()]),
                enable_monitoring: Some(true),
                ..Default::default()
            }),
            additional_gids: vec![44],
            ..Default::default()
        },
    }
}

#[test]
fn our_specs_validate_against_the_published_schema() {
    let spec = full_spec();
    assert!(validate(&spec).is_empty(), "{:?}", validate(&spec));
    assert_eq!(minimum_version(&spec), version::V1_1_0);
    let from_json: serde_json::Value = serde_json::from_str(&spec.to_json_pretty()).unwrap();
    schema_check(&from_json).unwrap();
    let from_yaml: serde_json::Value = serde_norway::from_str(&spec.to_yaml()).unwrap();
    schema_check(&from_yaml).unwrap();
    assert_eq!(from_json, from_yaml);
    for text in [spec.to_json_pretty(), spec.to_yaml()] {
        assert_eq!(Spec::from_bytes(text.as_bytes(), None).unwrap(), spec);
    }
    // The schema really is loaded: a mount without hostPath is refused by it.
    let mut broken = from_json.clone();
    broken["containerEdits"]["mounts"][0]
        .as_object_mut()
        .unwrap()
        .remove("hostPath");
    assert!(schema_check(&broken).is_err());
}

#[test]
fn nvidia_reference_spec() {
    let raw = read_test_file("data/nvidia-ctk-cdi-generate.yaml");
    let spec = Spec::from_bytes(raw.as_bytes(), Some(Format::Yaml)).unwrap();
    assert_eq!(spec.kind, "nvidia.com/gpu");
    assert_eq!(spec.devices.len(), 5);
    assert_eq!(minimum_version(&spec), version::V0_5_0);
    // The placeholder is not an absolute path, and validation says so for each hostPath.
    let issues = validate(&spec);
    assert!(!issues.is_empty());
    assert!(issues
        .iter()
        .all(|i| i.field.ends_with(".hostPath") && i.message.contains("not an absolute path")));
    // With HOSTROOT standing for a real directory, it is valid.
    let real = Spec::from_bytes(reference_spec_text().as_bytes(), None).unwrap();
    assert!(validate(&real).is_empty(), "{:?}", validate(&real));
    // Round trips, in both formats, and keeps NVIDIA's field order.
    for text in [spec.to_yaml(), spec.to_json_pretty()] {
        assert_eq!(Spec::from_bytes(text.as_bytes(), None).unwrap(), spec);
    }
    let ours: serde_json::Value = serde_norway::from_str(&spec.to_yaml()).unwrap();
    let theirs: serde_json::Value = serde_norway::from_str(&raw).unwrap();
    assert_eq!(ours, theirs);
    let keys =
        |v: &serde_json::Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&ours), keys(&theirs));
    assert_eq!(
        keys(&ours["containerEdits"]),
        keys(&theirs["containerEdits"])
    );
    assert_eq!(
        keys(&ours["devices"][1]["containerEdits"]["deviceNodes"][0]),
        [
            "path",
            "hostPath",
            "major",
            "minor",
            "fileMode",
            "permissions"
        ]
    );
    assert_eq!(
        keys(&ours["containerEdits"]["mounts"][0]),
        keys(&theirs["containerEdits"]["mounts"][0])
    );
    assert_eq!(
        keys(&ours["containerEdits"]["hooks"][0]),
        keys(&theirs["containerEdits"]["hooks"][0])
    );
    schema_check(&ours).unwrap();
    assert!(spec
        .to_yaml()
        .starts_with("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n"));
}

#[test]
fn digit_device_name_needs_0_5_0() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("old.yaml");
    std::fs::write(
        &p,
        "cdiVersion: 0.3.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n",
    )
    .unwrap();
    let msg = Spec::load_valid(&p).unwrap_err().to_string();
    assert_eq!(
        msg,
        format!(
            "{}: cdiVersion: cdiVersion 0.3.0 is too old: the spec uses a device name starting \
             with a digit (\"0\"), which needs cdiVersion 0.5.0 or later",
            p.display()
        )
    );
}
