use std::fs;
use std::path::{Path, PathBuf};

use gpuctk_cdi::Registry;

fn spec(kind: &str, devices: &[&str], tag: &str) -> String {
    let devs: String = devices
        .iter()
        .map(|n| format!("- name: \"{n}\"\n  containerEdits:\n    env: [\"WHO_{n}={tag}\"]\n"))
        .collect();
    format!("cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n{devs}")
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let etc = t.path().join("etc/cdi");
    let run = t.path().join("run/cdi");
    fs::create_dir_all(&etc).unwrap();
    fs::create_dir_all(&run).unwrap();
    (t, etc, run)
}

fn env_of(reg: &Registry, name: &str) -> Vec<String> {
    reg.resolve(&[name]).unwrap().edits.env
}

fn errors_for<'a>(reg: &'a Registry, p: &Path) -> Vec<&'a str> {
    reg.errors()
        .iter()
        .filter(|(f, _)| f == p)
        .map(|(_, m)| m.as_str())
        .collect()
}

#[test]
fn later_dir_wins() {
    let (_t, etc, run) = dirs();
    fs::write(
        etc.join("nvidia.yaml"),
        spec("nvidia.com/gpu", &["0", "1"], "etc"),
    )
    .unwrap();
    fs::write(
        run.join("nvidia.json.yaml"),
        spec("nvidia.com/gpu", &["0", "all"], "run"),
    )
    .unwrap();
    let reg = Registry::load(&[etc.clone(), run.clone()]);
    assert!(reg.errors().is_empty(), "{:?}", reg.errors());
    assert_eq!(
        reg.device_names(),
        ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"]
    );
    assert_eq!(env_of(&reg, "nvidia.com/gpu=0"), ["WHO_0=run"]);
    assert_eq!(env_of(&reg, "nvidia.com/gpu=1"), ["WHO_1=etc"]);
    // Reversing the order reverses the priority.
    let reg = Registry::load(&[run, etc.clone()]);
    assert_eq!(env_of(&reg, "nvidia.com/gpu=0"), ["WHO_0=etc"]);
    assert!(reg.spec_for_path(&etc.join("nvidia.yaml")).is_some());
    assert!(reg.spec_for_path(&etc.join("other.yaml")).is_none());
}

#[test]
fn same_dir_conflict_drops_device_and_blames_both_files() {
    let (_t, etc, run) = dirs();
    let a = etc.join("a.yaml");
    let b = etc.join("b.json");
    fs::write(&a, spec("nvidia.com/gpu", &["0", "1"], "a")).unwrap();
    fs::write(
        &b,
        r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"env":["WHO_0=b"]}},{"name":"2","containerEdits":{"env":["WHO_2=b"]}}]}"#,
    )
    .unwrap();
    let reg = Registry::load(&[etc.clone(), run.clone()]);
    assert_eq!(reg.device_names(), ["nvidia.com/gpu=1", "nvidia.com/gpu=2"]);
    for (f, other) in [(&a, &b), (&b, &a)] {
        let errs = errors_for(&reg, f);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("conflicting CDI device nvidia.com/gpu=0"),
            "{}",
            errs[0]
        );
        assert!(
            errs[0].contains(&other.display().to_string()),
            "{}",
            errs[0]
        );
    }
    // Regression: the request was told the device is "not defined"; it is defined twice.
    let e = reg.resolve(&["nvidia.com/gpu=0"]).unwrap_err().to_string();
    assert!(
        e.starts_with("unresolvable CDI device nvidia.com/gpu=0: defined by ")
            && e.contains(&a.display().to_string())
            && e.contains(&b.display().to_string())
            && e.contains("remove all but one"),
        "{e}"
    );
    // A higher-priority dir overrides the conflict.
    fs::write(run.join("c.yaml"), spec("nvidia.com/gpu", &["0"], "run")).unwrap();
    let reg = Registry::load(&[etc, run]);
    assert_eq!(env_of(&reg, "nvidia.com/gpu=0"), ["WHO_0=run"]);
}

#[test]
fn broken_and_foreign_files() {
    let (t, etc, run) = dirs();
    fs::write(
        etc.join("good.yaml"),
        spec("nvidia.com/gpu", &["0", "1", "all"], "g"),
    )
    .unwrap();
    let syntax = etc.join("syntax.yaml");
    fs::write(&syntax, "cdiVersion: 0.5.0\nkind: [\n").unwrap();
    let unknown = etc.join("unknown.json");
    fs::write(
        &unknown,
        r#"{"cdiVersion":"0.5.0","kind":"x.com/y","devices":[],"extra":1}"#,
    )
    .unwrap();
    let invalid = run.join("invalid.yml");
    fs::write(
        &invalid,
        "cdiVersion: 0.5.0\nkind: x.com/y\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - path: dev/a\n",
    )
    .unwrap();
    // Not spec files: ignored without an error.
    fs::write(etc.join("notes.txt"), "hello").unwrap();
    fs::write(etc.join(".nvidia.yaml.1.0.tmp"), "partial").unwrap();
    fs::create_dir(etc.join("sub")).unwrap();
    fs::write(
        etc.join("sub/nested.yaml"),
        spec("nested.com/x", &["a"], "n"),
    )
    .unwrap();
    fs::create_dir(etc.join("dir.yaml")).unwrap();
    let missing = t.path().join("does-not-exist");

    let reg = Registry::load(&[missing, etc.clone(), run]);
    assert_eq!(
        reg.device_names(),
        ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"]
    );
    assert_eq!(reg.errors().len(), 3, "{:?}", reg.errors());
    let s = errors_for(&reg, &syntax);
    assert!(
        s[0].starts_with(&format!("{}: line", syntax.display())),
        "{s:?}"
    );
    let u = errors_for(&reg, &unknown);
    assert!(u[0].contains("unknown field `extra`"), "{u:?}");
    let i = errors_for(&reg, &invalid);
    assert!(
        i[0].ends_with(
            "device \"a\": containerEdits.deviceNodes[0].path: \"dev/a\" is not an absolute path"
        ),
        "{i:?}"
    );
    let e = reg.resolve(&["nvidia.com/gpu=9"]).unwrap_err().to_string();
    assert!(
        e.starts_with("unresolvable CDI device nvidia.com/gpu=9: nvidia.com/gpu has 0, 1, all"),
        "{e}"
    );
    assert!(e.contains("syntax.yaml"), "skipped files are named: {e}");
}

#[test]
fn resolve_across_specs() {
    let (_t, etc, _run) = dirs();
    fs::write(
        etc.join("a.yaml"),
        format!(
            "{}containerEdits:\n  env: [COMMON_A=1]\n",
            spec("a.com/x", &["0", "1"], "a")
        ),
    )
    .unwrap();
    fs::write(
        etc.join("b.yaml"),
        format!(
            "{}containerEdits:\n  env: [COMMON_B=1]\n",
            spec("b.com/y", &["z"], "b")
        ),
    )
    .unwrap();
    let reg = Registry::load(std::slice::from_ref(&etc));
    let r = reg
        .resolve(&["b.com/y=z", "a.com/x=1", "a.com/x=0"])
        .unwrap();
    assert_eq!(
        r.edits.env,
        ["COMMON_B=1", "WHO_z=b", "COMMON_A=1", "WHO_1=a", "WHO_0=a"]
    );
    assert_eq!(r.spec_paths, [etc.join("b.yaml"), etc.join("a.yaml")]);
    assert_eq!(reg.resolve(&[]).unwrap(), Default::default());
}

#[test]
fn default_dirs() {
    assert_eq!(gpuctk_cdi::DEFAULT_SPEC_DIRS, ["/etc/cdi", "/var/run/cdi"]);
}
