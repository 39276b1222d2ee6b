use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use gpuctk_cdi::{write_spec, Format, Spec};

use crate::reference_spec_text;

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn writes_and_reads_back() {
    let d = tempfile::tempdir().unwrap();
    let spec = Spec::from_bytes(reference_spec_text().as_bytes(), None).unwrap();
    for (name, format) in [("nvidia.yaml", Format::Yaml), ("nvidia.json", Format::Json)] {
        let p = d.path().join(name);
        write_spec(&p, &spec, format).unwrap();
        assert_eq!(Spec::load_valid(&p).unwrap(), spec);
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }
    assert!(fs::read_to_string(d.path().join("nvidia.yaml"))
        .unwrap()
        .starts_with("---\n"));
    assert!(fs::read_to_string(d.path().join("nvidia.json"))
        .unwrap()
        .starts_with("{\n  \"cdiVersion\""));
    assert_eq!(names_in(d.path()), ["nvidia.json", "nvidia.yaml"]);
}

#[test]
fn missing_dir_is_an_error_naming_the_path() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("no-such-dir/nvidia.yaml");
    let spec = Spec::from_bytes(reference_spec_text().as_bytes(), None).unwrap();
    let msg = write_spec(&p, &spec, Format::Yaml).unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!("{}: cannot write CDI spec", p.display())),
        "{msg}"
    );
    assert!(!d.path().join("no-such-dir").exists());
}

#[test]
fn failed_rename_leaves_old_content_and_no_temp_files() {
    let d = tempfile::tempdir().unwrap();
    // The target is a non-empty directory, so the final rename fails after the temp file is
    // written; the old content and nothing else must remain.
    let target = d.path().join("nvidia.yaml");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("old"), "old").unwrap();
    let spec = Spec::from_bytes(reference_spec_text().as_bytes(), None).unwrap();
    let msg = write_spec(&target, &spec, Format::Yaml)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("nvidia.yaml: cannot write CDI spec"), "{msg}");
    assert_eq!(fs::read_to_string(target.join("old")).unwrap(), "old");
    assert_eq!(names_in(d.path()), ["nvidia.yaml"]);
}

#[test]
fn read_only_dir_leaves_existing_file_intact() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("nvidia.yaml");
    fs::write(&p, "old content").unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o555)).unwrap();
    // root ignores directory permissions; only check where they bind.
    let probe = d.path().join("probe");
    let binding = fs::write(&probe, "").is_err();
    let _ = fs::remove_file(&probe);
    let spec = Spec::from_bytes(reference_spec_text().as_bytes(), None).unwrap();
    let result = write_spec(&p, &spec, Format::Yaml);
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    if binding {
        let msg = result.unwrap_err().to_string();
        assert!(msg.contains("cannot write CDI spec"), "{msg}");
        assert_eq!(fs::read_to_string(&p).unwrap(), "old content");
    } else {
        result.unwrap();
        assert!(fs::read_to_string(&p).unwrap().starts_with("---\n"));
    }
    assert_eq!(names_in(d.path()), ["nvidia.yaml"]);
}
