//! Golden-file tests of configure / unconfigure per engine, idempotence, round trips, `apply`
//! and the unified diff (checked against GNU `diff -u`).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuctk_engines::{apply, configure_with, unconfigure_with, Edit, Engine, EngineError, Options};

const BIN: &str = "/usr/bin/nvidia-container-runtime";

fn data(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn opts(set_as_default: bool, enable_cdi: bool) -> Options {
    Options {
        runtime_name: "nvidia".into(),
        runtime_path: BIN.into(),
        set_as_default,
        enable_cdi,
        drop_in: None,
    }
}

fn no_files(_: &Path) -> std::io::Result<Option<Vec<u8>>> {
    Ok(None)
}

thread_local! {
    /// The ledgers (`gpuctk_engines::added`) `conf` and `unconf` wrote, by path: each test runs
    /// on its own thread, so each has its own.
    static LEDGERS: std::cell::RefCell<std::collections::HashMap<PathBuf, Vec<u8>>> =
        Default::default();
}

fn is_ledger(p: &Path) -> bool {
    p.to_string_lossy()
        .ends_with(gpuctk_engines::added::LEDGER_SUFFIX)
}

/// Reads the ledgers written so far; every other file is absent.
fn ledgers_only(p: &Path) -> std::io::Result<Option<Vec<u8>>> {
    Ok(LEDGERS.with(|l| l.borrow().get(p).cloned()))
}

/// Keep the ledger edits in `LEDGERS`, return the others.
fn keep_ledgers(edits: Vec<Edit>) -> Vec<Edit> {
    edits
        .into_iter()
        .filter(|e| {
            if !is_ledger(&e.path) {
                return true;
            }
            LEDGERS.with(|l| {
                let mut l = l.borrow_mut();
                assert_eq!(l.get(&e.path), e.before.as_ref(), "ledger before");
                if e.delete {
                    l.remove(&e.path);
                } else {
                    l.insert(e.path.clone(), e.after.clone());
                }
            });
            false
        })
        .collect()
}

/// configure, with its ledger kept in `LEDGERS` (and not returned).
fn conf(engine: Engine, path: &str, cur: Option<&[u8]>, o: &Options) -> Vec<Edit> {
    keep_ledgers(configure_with(engine, Path::new(path), cur, o, &ledgers_only).unwrap())
}

/// unconfigure, reading and updating the ledgers `conf` kept.
fn unconf(engine: Engine, path: &str, cur: Option<&[u8]>, o: &Options) -> Vec<Edit> {
    keep_ledgers(unconfigure_with(engine, Path::new(path), cur, o, &ledgers_only).unwrap())
}

/// unconfigure as an older version's configure left it: no ledger.
fn unconf_without_ledger(engine: Engine, path: &str, cur: Option<&[u8]>, o: &Options) -> Vec<Edit> {
    unconfigure_with(engine, Path::new(path), cur, o, &no_files).unwrap()
}

/// Compare bytes, showing a diff on mismatch.
fn assert_bytes(what: &str, got: &[u8], want: &[u8]) {
    if got != want {
        let e = Edit::write(PathBuf::from(what), Some(want.to_vec()), got.to_vec());
        panic!(
            "{what}: output differs from expected (- expected, + got):\n{}",
            e.unified_diff()
        );
    }
}

fn engine_path(engine: Engine) -> &'static str {
    match engine {
        Engine::Docker => "/etc/docker/daemon.json",
        Engine::Containerd => "/etc/containerd/config.toml",
        Engine::Crio => "/etc/crio/crio.conf",
    }
}

/// The main-file golden cases: (engine, fixture, expected, set_as_default, enable_cdi).
const MAIN_CASES: &[(Engine, &str, &str, bool, bool)] = &[
    (
        Engine::Containerd,
        "containerd-v1.toml",
        "containerd-v1.toml.expected",
        false,
        false,
    ),
    (
        Engine::Containerd,
        "containerd-v1.toml",
        "containerd-v1.toml.default.expected",
        true,
        false,
    ),
    (
        Engine::Containerd,
        "containerd-v1.toml",
        "containerd-v1.toml.cdi.expected",
        false,
        true,
    ),
    (
        Engine::Containerd,
        "containerd-v2.toml",
        "containerd-v2.toml.expected",
        false,
        false,
    ),
    (
        Engine::Containerd,
        "containerd-v2.toml",
        "containerd-v2.toml.default.expected",
        true,
        false,
    ),
    (
        Engine::Containerd,
        "containerd-v2.toml",
        "containerd-v2.toml.cdi.expected",
        false,
        true,
    ),
    (
        Engine::Containerd,
        "containerd-v3.toml",
        "containerd-v3.toml.expected",
        false,
        false,
    ),
    (
        Engine::Containerd,
        "containerd-v3.toml",
        "containerd-v3.toml.default.expected",
        true,
        false,
    ),
    (
        Engine::Containerd,
        "containerd-v3.toml",
        "containerd-v3.toml.cdi.expected",
        false,
        true,
    ),
    (
        Engine::Docker,
        "daemon.json",
        "daemon.json.expected",
        false,
        false,
    ),
    (
        Engine::Docker,
        "daemon.json",
        "daemon.json.default.expected",
        true,
        false,
    ),
    (
        Engine::Docker,
        "daemon.json",
        "daemon.json.cdi.expected",
        false,
        true,
    ),
];

#[test]
fn golden_main_files() {
    for &(engine, input, expected, def, cdi) in MAIN_CASES {
        let cur = data(input);
        let edits = conf(engine, engine_path(engine), Some(&cur), &opts(def, cdi));
        assert_eq!(edits.len(), 1, "{expected}");
        let e = &edits[0];
        assert_eq!(e.path, Path::new(engine_path(engine)));
        assert_eq!(e.before.as_deref(), Some(cur.as_slice()));
        assert!(!e.delete);
        assert_eq!(
            e.backup,
            PathBuf::from(format!("{}.bak", engine_path(engine)))
        );
        assert_bytes(expected, &e.after, &data(expected));
    }
}

#[test]
fn configure_twice_is_a_noop() {
    for &(engine, input, _, def, cdi) in MAIN_CASES {
        let o = opts(def, cdi);
        let once = conf(engine, engine_path(engine), Some(&data(input)), &o);
        let twice = conf(engine, engine_path(engine), Some(&once[0].after), &o);
        assert_eq!(twice.len(), 1);
        assert!(twice[0].is_noop(), "{input} {def} {cdi}");
        assert_eq!(twice[0].unified_diff(), "");
    }
}

#[test]
fn unconfigure_restores_the_original_bytes() {
    // Plain configure, and --set-as-default where the original named runc, round-trip exactly.
    let cases: &[(Engine, &str, bool)] = &[
        (Engine::Containerd, "containerd-v1.toml", false),
        (Engine::Containerd, "containerd-v2.toml", false),
        (Engine::Containerd, "containerd-v2.toml", true),
        (Engine::Containerd, "containerd-v3.toml", false),
        (Engine::Containerd, "containerd-v3.toml", true),
        (Engine::Docker, "daemon.json", false),
        (Engine::Docker, "daemon.json", true),
    ];
    for &(engine, input, def) in cases {
        let orig = data(input);
        let o = opts(def, false);
        let c = conf(engine, engine_path(engine), Some(&orig), &o);
        let u = unconf(engine, engine_path(engine), Some(&c[0].after), &o);
        assert_eq!(u.len(), 1);
        assert_bytes(input, &u[0].after, &orig);
        // And unconfigure of an unconfigured file changes nothing.
        let again = unconf(engine, engine_path(engine), Some(&orig), &o);
        assert!(again.iter().all(Edit::is_noop), "{input}");
    }
}

#[test]
fn set_as_default_on_a_file_without_the_key_reverts_to_runc() {
    // v1 fixture: the containerd table has other keys but no default_runtime_name. With the
    // ledger, unconfigure knows the key was absent and removes it; without one (a config an
    // older version configured) it cannot know, and writes containerd's own default.
    let orig = data("containerd-v1.toml");
    let o = opts(true, false);
    let c = conf(Engine::Containerd, "/c.toml", Some(&orig), &o);
    let u = unconf_without_ledger(Engine::Containerd, "/c.toml", Some(&c[0].after), &o);
    let want = String::from_utf8(orig.clone()).unwrap().replace(
        "no_pivot = false\n",
        "no_pivot = false\n      default_runtime_name = \"runc\"\n",
    );
    assert_bytes("v1 default", &u[0].after, want.as_bytes());
    let u = unconf(Engine::Containerd, "/c.toml", Some(&c[0].after), &o);
    assert_bytes("v1 default, ledger", &u[0].after, &orig);
}

#[test]
fn containerd_default_in_a_table_of_its_own_is_removed_whole() {
    let orig =
        b"[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n";
    let o = opts(true, false);
    let c = conf(Engine::Containerd, "/c.toml", Some(orig), &o);
    let after = String::from_utf8(c[0].after.clone()).unwrap();
    assert!(
        after.contains("default_runtime_name = \"nvidia\""),
        "{after}"
    );
    let u = unconf(Engine::Containerd, "/c.toml", Some(&c[0].after), &o);
    assert_bytes("own table", &u[0].after, orig);
}

#[test]
fn cdi_is_put_back_by_unconfigure_and_left_on_without_a_ledger() {
    let orig = data("containerd-v2.toml");
    let o = opts(false, true);
    let c = conf(Engine::Containerd, "/c.toml", Some(&orig), &o);
    let u = unconf(Engine::Containerd, "/c.toml", Some(&c[0].after), &o);
    assert_bytes("cdi, ledger", &u[0].after, &orig);
    let u = unconf_without_ledger(Engine::Containerd, "/c.toml", Some(&c[0].after), &o);
    let want = String::from_utf8(orig)
        .unwrap()
        .replace("enable_cdi = false", "enable_cdi = true");
    assert_bytes("cdi", &u[0].after, want.as_bytes());
}

#[test]
fn containerd_absent_file_gets_a_minimal_v2_config() {
    let edits = conf(
        Engine::Containerd,
        "/etc/containerd/config.toml",
        None,
        &opts(true, false),
    );
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0].before, None);
    let want = "version = 2

[plugins.\"io.containerd.grpc.v1.cri\".containerd]
default_runtime_name = \"nvidia\"

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]
runtime_type = \"io.containerd.runc.v2\"
runtime_root = \"\"
runtime_engine = \"\"
privileged_without_host_devices = false
container_annotations = [\"cdi.k8s.io/*\"]

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]
BinaryName = \"/usr/bin/nvidia-container-runtime\"
";
    assert_bytes("absent", &edits[0].after, want.as_bytes());
    // It parses back, and configure on it is a no-op.
    let again = conf(
        Engine::Containerd,
        "/c.toml",
        Some(&edits[0].after),
        &opts(true, false),
    );
    assert!(again[0].is_noop());
}

#[test]
fn containerd_v3_fallback_has_no_removed_fields() {
    let orig = b"version = 3\n";
    let edits = conf(
        Engine::Containerd,
        "/c.toml",
        Some(orig),
        &opts(false, false),
    );
    let want = "version = 3

[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]
runtime_type = \"io.containerd.runc.v2\"
privileged_without_host_devices = false
container_annotations = [\"cdi.k8s.io/*\"]

[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]
BinaryName = \"/usr/bin/nvidia-container-runtime\"
";
    assert_bytes("v3 fallback", &edits[0].after, want.as_bytes());
    let u = unconf(
        Engine::Containerd,
        "/c.toml",
        Some(&edits[0].after),
        &opts(false, false),
    );
    assert_bytes("v3 fallback undo", &u[0].after, orig);
}

#[test]
fn containerd_copies_the_named_default_runtime_not_runc() {
    let orig = b"version = 2
[plugins.\"io.containerd.grpc.v1.cri\".containerd]
  default_runtime_name = \"crun\"
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]
  runtime_type = \"io.containerd.runc.v2\"
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]
  runtime_type = \"io.containerd.runc.v2\"
  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun.options]
    BinaryName = \"/usr/bin/crun\"
    SystemdCgroup = true
";
    let edits = conf(
        Engine::Containerd,
        "/c.toml",
        Some(orig),
        &opts(false, false),
    );
    let after = String::from_utf8(edits[0].after.clone()).unwrap();
    let tail = "
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]
  runtime_type = \"io.containerd.runc.v2\"
  container_annotations = [\"cdi.k8s.io/*\"]
  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]
    BinaryName = \"/usr/bin/nvidia-container-runtime\"
    SystemdCgroup = true
";
    assert!(after.ends_with(tail), "{after}");
    assert!(after.starts_with(std::str::from_utf8(orig).unwrap()));
}

#[test]
fn containerd_existing_entry_is_updated_in_place() {
    let orig = b"version = 2
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]
  runtime_type = \"io.containerd.runc.v2\"
  privileged_without_host_devices = true # tuned by hand
  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]
    BinaryName = \"/usr/local/nvidia/toolkit/nvidia-container-runtime\"
";
    let edits = conf(
        Engine::Containerd,
        "/c.toml",
        Some(orig),
        &opts(false, false),
    );
    // The admin's key is kept; the CDI annotation pattern is added next to it.
    let want = String::from_utf8(orig.to_vec())
        .unwrap()
        .replace("/usr/local/nvidia/toolkit/nvidia-container-runtime", BIN)
        .replace(
            "# tuned by hand\n",
            "# tuned by hand\n  container_annotations = [\"cdi.k8s.io/*\"]\n",
        );
    assert_bytes("in place", &edits[0].after, want.as_bytes());
}

#[test]
fn containerd_imports_write_a_drop_in_and_leave_the_main_file() {
    let main = data("containerd-v2-imports.toml");
    let path = "/etc/containerd/config.toml";
    let drop_in = Path::new("/etc/containerd/conf.d/99-nvidia.toml");
    let o = opts(false, false);
    let edits = conf(Engine::Containerd, path, Some(&main), &o);
    assert_eq!(edits.len(), 1, "only the drop-in is written");
    let e = &edits[0];
    assert_eq!(e.path, drop_in);
    assert_eq!(e.before, None);
    assert_eq!(
        e.backup,
        Path::new("/etc/containerd/conf.d/99-nvidia.toml.bak")
    );
    assert_bytes(
        "drop-in",
        &e.after,
        &data("containerd-v2-imports.dropin.expected"),
    );

    // The drop-in is valid TOML that a second configure (seeing it) leaves alone.
    let written = e.after.clone();
    let reader = move |p: &Path| Ok((p == drop_in).then(|| written.clone()));
    let again = configure_with(
        Engine::Containerd,
        Path::new(path),
        Some(&main),
        &o,
        &reader,
    )
    .unwrap();
    assert_eq!(again.len(), 1);
    assert!(again[0].is_noop());

    // unconfigure deletes it, and leaves the main file alone.
    let u = unconfigure_with(
        Engine::Containerd,
        Path::new(path),
        Some(&main),
        &o,
        &reader,
    )
    .unwrap();
    assert_eq!(u.len(), 1);
    assert!(u[0].delete);
    assert_eq!(u[0].path, drop_in);
    assert_eq!(u[0].before.as_deref(), Some(e.after.as_slice()));
}

#[test]
fn containerd_drop_in_carries_default_and_cdi() {
    let main = data("containerd-v2-imports.toml");
    let edits = conf(
        Engine::Containerd,
        "/etc/containerd/config.toml",
        Some(&main),
        &opts(true, true),
    );
    let want = String::from_utf8(data("containerd-v2-imports.dropin.expected"))
        .unwrap()
        .replace(
            "default_runtime_name = \"runc\"",
            "default_runtime_name = \"nvidia\"",
        )
        .replace("# pinned\n", "# pinned\n  enable_cdi = true\n");
    assert_bytes("drop-in default+cdi", &edits[0].after, want.as_bytes());
}

#[test]
fn containerd_relative_and_catch_all_imports() {
    // Relative to the config's directory; a `*` pattern would load a `.bak`, so the backup
    // goes outside the directory.
    let main = b"version = 2\nimports = [\"conf.d/*\"]\n";
    let edits = conf(
        Engine::Containerd,
        "/opt/ctr/config.toml",
        Some(main),
        &opts(false, false),
    );
    assert_eq!(edits[0].path, Path::new("/opt/ctr/conf.d/99-nvidia.toml"));
    assert_eq!(
        edits[0].backup,
        Path::new("/opt/ctr/conf.d.99-nvidia.toml.bak")
    );
    // An import of a single other file is not a drop-in directory: the main file is edited.
    let main = b"version = 2\nimports = [\"/etc/containerd/runtimes.toml\"]\n";
    let edits = conf(
        Engine::Containerd,
        "/etc/containerd/config.toml",
        Some(main),
        &opts(false, false),
    );
    assert_eq!(edits[0].path, Path::new("/etc/containerd/config.toml"));
}

#[test]
fn crio_drop_in() {
    let main = data("crio.conf");
    for (def, expected) in [
        (false, "crio.dropin.expected"),
        (true, "crio.dropin.default.expected"),
    ] {
        let o = opts(def, false);
        let edits = conf(Engine::Crio, "/etc/crio/crio.conf", Some(&main), &o);
        assert_eq!(edits.len(), 1);
        let e = &edits[0];
        assert_eq!(e.path, Path::new("/etc/crio/crio.conf.d/99-nvidia.toml"));
        assert_eq!(
            e.backup,
            Path::new("/etc/crio/crio.conf.d.99-nvidia.toml.bak")
        );
        assert_bytes(expected, &e.after, &data(expected));

        let written = e.after.clone();
        let reader = move |p: &Path| {
            Ok((p == Path::new("/etc/crio/crio.conf.d/99-nvidia.toml")).then(|| written.clone()))
        };
        let again = configure_with(
            Engine::Crio,
            Path::new("/etc/crio/crio.conf"),
            Some(&main),
            &o,
            &reader,
        )
        .unwrap();
        assert!(again[0].is_noop());
        let u = unconfigure_with(
            Engine::Crio,
            Path::new("/etc/crio/crio.conf"),
            Some(&main),
            &o,
            &reader,
        )
        .unwrap();
        assert_eq!(u.len(), 1);
        assert!(u[0].delete && !u[0].is_noop());
    }
    // The drop-in dir follows --config.
    let edits = conf(Engine::Crio, "/tmp/x/crio.conf", None, &opts(false, false));
    assert_eq!(
        edits[0].path,
        Path::new("/tmp/x/crio.conf.d/99-nvidia.toml")
    );
    assert_bytes(
        "crio no main",
        &edits[0].after,
        format!(
            "{}: runtimes registered with CRI-O.\n# `gpuctk runtime unconfigure` removes them; removing this file undoes them all.\n\n[crio.runtime.runtimes.nvidia]\nruntime_path = \"{BIN}\"\nruntime_type = \"oci\"\n",
            gpuctk_engines::OURS_HEADER
        )
        .as_bytes(),
    );
}

#[test]
fn crio_rejects_cdi() {
    let e = configure_with(
        Engine::Crio,
        Path::new("/etc/crio/crio.conf"),
        None,
        &opts(false, true),
        &no_files,
    )
    .unwrap_err();
    assert!(matches!(e, EngineError::Crio(_)));
    assert!(e.to_string().contains("not supported"), "{e}");
}

#[test]
fn docker_absent_or_empty_is_an_empty_object() {
    for cur in [None, Some(&b""[..]), Some(&b" \n"[..])] {
        let edits = conf(
            Engine::Docker,
            "/etc/docker/daemon.json",
            cur,
            &opts(false, false),
        );
        let want = format!("{{\n    \"runtimes\": {{\n        \"nvidia\": {{\n            \"path\": \"{BIN}\",\n            \"args\": []\n        }}\n    }}\n}}\n");
        assert_bytes("empty", &edits[0].after, want.as_bytes());
        let u = unconf(
            Engine::Docker,
            "/etc/docker/daemon.json",
            Some(&edits[0].after),
            &opts(false, false),
        );
        assert_bytes("empty undo", &u[0].after, b"{}\n");
    }
    // unconfigure of an absent file: nothing to do, no file created.
    assert!(unconf(
        Engine::Docker,
        "/etc/docker/daemon.json",
        None,
        &opts(false, false)
    )
    .is_empty());
}

#[test]
fn docker_other_layouts() {
    // A 2-space file: content and key order survive, the layout becomes 4-space.
    let two = b"{\n  \"log-driver\": \"journald\",\n  \"default-runtime\": \"runc\"\n}\n";
    let o = opts(true, false);
    let c = conf(Engine::Docker, "/d.json", Some(two), &o);
    let u = unconf(Engine::Docker, "/d.json", Some(&c[0].after), &o);
    // The user's own default comes back, where it was.
    assert_bytes(
        "2-space",
        &u[0].after,
        b"{\n    \"log-driver\": \"journald\",\n    \"default-runtime\": \"runc\"\n}\n",
    );
    // An already-configured file in any layout is left byte-for-byte alone.
    let compact = format!("{{\"runtimes\":{{\"nvidia\":{{\"path\":\"{BIN}\",\"args\":[]}}}}}}");
    let again = conf(
        Engine::Docker,
        "/d.json",
        Some(compact.as_bytes()),
        &opts(false, false),
    );
    assert!(again[0].is_noop());
}

#[test]
fn invalid_json_names_file_line_and_column() {
    let bad = b"{\n    \"log-driver\": \"json-file\",\n    \"runtimes\": {,\n}\n";
    let e = configure_with(
        Engine::Docker,
        Path::new("/etc/docker/daemon.json"),
        Some(bad),
        &opts(false, false),
        &no_files,
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("/etc/docker/daemon.json:3:18: invalid JSON: "),
        "{msg}"
    );
    let e = configure_with(
        Engine::Docker,
        Path::new("/d.json"),
        Some(b"[1]"),
        &opts(false, false),
        &no_files,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a JSON object"), "{e}");
}

#[test]
fn invalid_toml_names_file_and_line() {
    let bad = b"version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \n";
    for engine in [Engine::Containerd, Engine::Crio] {
        let e = configure_with(
            engine,
            Path::new("/etc/x/config.toml"),
            Some(bad),
            &opts(false, false),
            &no_files,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("/etc/x/config.toml:4:"), "{msg}");
        assert!(msg.contains("invalid TOML"), "{msg}");
    }
}

#[test]
fn engine_names() {
    for e in [Engine::Docker, Engine::Containerd, Engine::Crio] {
        assert_eq!(e.to_string().parse::<Engine>().unwrap(), e);
    }
    assert!("podman".parse::<Engine>().is_err());
    assert_eq!(
        gpuctk_engines::default_config_path(Engine::Crio),
        Path::new("/etc/crio/crio.conf")
    );
}

// ---- apply ----

fn read_edits(engine: Engine, path: &Path, o: &Options) -> Vec<Edit> {
    let cur = gpuctk_engines::read_optional(path).unwrap();
    gpuctk_engines::configure(engine, path, cur.as_deref(), o).unwrap()
}

#[test]
fn apply_writes_keeps_mode_and_backup() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("daemon.json");
    let orig = data("daemon.json");
    fs::write(&p, &orig).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    let o = opts(false, false);

    let edits = read_edits(Engine::Docker, &p, &o);
    apply(&edits).unwrap();
    assert_eq!(fs::read(&p).unwrap(), data("daemon.json.expected"));
    assert_eq!(
        fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let bak = d.path().join("daemon.json.bak");
    assert_eq!(fs::read(&bak).unwrap(), orig);
    assert_eq!(
        fs::metadata(&bak).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Second round: nothing changes, no file (nor backup) is rewritten.
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    let (file_ino, bak_ino) = (ino(&p), ino(&bak));
    let edits = read_edits(Engine::Docker, &p, &o);
    assert!(edits.iter().all(Edit::is_noop));
    apply(&edits).unwrap();
    assert_eq!((ino(&p), ino(&bak)), (file_ino, bak_ino));

    // A backup already holding the previous bytes is not rewritten either.
    fs::write(&p, &orig).unwrap();
    let edits = read_edits(Engine::Docker, &p, &o);
    apply(&edits).unwrap();
    assert_eq!(ino(&bak), bak_ino);
    assert_eq!(fs::read(&bak).unwrap(), orig);
}

#[test]
fn apply_new_file_and_drop_in_dir_and_delete() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("crio.conf");
    let o = opts(false, false);
    let edits = read_edits(Engine::Crio, &main, &o);
    apply(&edits).unwrap();
    let drop_in = d.path().join("crio.conf.d/99-nvidia.toml");
    assert_eq!(fs::read(&drop_in).unwrap(), edits[0].after);
    assert_eq!(
        fs::metadata(&drop_in).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert!(!main.exists(), "the main crio.conf is never written");

    let u = gpuctk_engines::unconfigure(Engine::Crio, &main, None, &o).unwrap();
    let done = apply(&u).unwrap();
    assert!(!drop_in.exists());
    // The drop-in is ours (it has no user original): no backup of it.
    assert_eq!(done[0].backup, gpuctk_engines::Backup::Ours);
    assert!(!d.path().join("crio.conf.d.99-nvidia.toml.bak").exists());
    assert_eq!(
        fs::read_dir(d.path().join("crio.conf.d")).unwrap().count(),
        0
    );
}

#[test]
fn apply_refuses_a_file_changed_since_read() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("config.toml");
    fs::write(&p, data("containerd-v2.toml")).unwrap();
    let edits = read_edits(Engine::Containerd, &p, &opts(false, false));
    fs::write(&p, b"version = 2\n# edited meanwhile\n").unwrap();
    let e = apply(&edits).unwrap_err();
    assert!(e.to_string().contains(&p.display().to_string()), "{e}");
    assert_eq!(fs::read(&p).unwrap(), b"version = 2\n# edited meanwhile\n");
    assert!(!d.path().join("config.toml.bak").exists());
}

#[test]
fn apply_failure_leaves_the_file_intact() {
    // The backup cannot be written (its name is taken by a directory): apply fails naming it,
    // before the file itself is touched. Works as root, unlike permission bits.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("config.toml");
    let orig = data("containerd-v3.toml");
    fs::write(&p, &orig).unwrap();
    fs::create_dir(d.path().join("config.toml.bak")).unwrap();
    let edits = read_edits(Engine::Containerd, &p, &opts(false, false));
    let e = apply(&edits).unwrap_err();
    assert!(e.to_string().contains("config.toml.bak"), "{e}");
    assert_eq!(fs::read(&p).unwrap(), orig);
}

#[test]
fn apply_in_read_only_dir_fails_and_leaves_the_file_intact() {
    // Root ignores permission bits, so make the directory a read-only tmpfs instead.
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("ro");
    fs::create_dir(&dir).unwrap();
    let mount = |args: &[&str]| {
        let st = std::process::Command::new("mount")
            .args(args)
            .arg(&dir)
            .status()
            .expect("mount(8)");
        assert!(st.success(), "mount {args:?} (needs root)");
    };
    mount(&["-t", "tmpfs", "tmpfs"]);
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Umount(dir.clone());
    let p = dir.join("daemon.json");
    let orig = data("daemon.json");
    fs::write(&p, &orig).unwrap();
    let edits = read_edits(Engine::Docker, &p, &opts(true, false));
    mount(&["-o", "remount,ro"]);
    let e = apply(&edits).unwrap_err();
    assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
    assert_eq!(fs::read(&p).unwrap(), orig);
}

// ---- unified diff against GNU diff ----

/// `diff -u` of two byte strings, without its two header lines.
fn gnu_diff(before: &[u8], after: &[u8]) -> String {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    fs::write(&a, before).unwrap();
    fs::write(&b, after).unwrap();
    let out = Command::new("diff")
        .arg("-u")
        .arg(&a)
        .arg(&b)
        .output()
        .expect("GNU diff");
    let s = String::from_utf8(out.stdout).unwrap();
    s.lines().skip(2).map(|l| format!("{l}\n")).collect()
}

fn our_diff(before: &[u8], after: &[u8]) -> String {
    let e = Edit::write(
        PathBuf::from("/etc/x"),
        Some(before.to_vec()),
        after.to_vec(),
    );
    let s = e.unified_diff();
    let mut lines = s.lines();
    assert_eq!(lines.next(), Some("--- a/etc/x"));
    assert_eq!(lines.next(), Some("+++ b/etc/x"));
    lines.map(|l| format!("{l}\n")).collect()
}

/// Apply `diff` to `before` with GNU patch.
fn patched(before: &[u8], diff: &str) -> Vec<u8> {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    fs::write(&f, before).unwrap();
    let pf = d.path().join("p.diff");
    fs::write(&pf, diff).unwrap();
    let st = Command::new("patch")
        .arg("-s")
        .arg(&f)
        .arg(&pf)
        .status()
        .expect("GNU patch");
    assert!(st.success(), "patch failed on:\n{diff}");
    fs::read(&f).unwrap()
}

/// The (removed, added) line counts of a diff body.
fn churn(d: &str) -> (usize, usize) {
    let n = |c| {
        d.lines()
            .filter(|l| l.starts_with(c) && !l.starts_with("@@"))
            .count()
    };
    (n('-'), n('+'))
}

fn diff_pairs() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for &(_, input, expected, _, _) in MAIN_CASES {
        pairs.push((data(input), data(expected)));
        pairs.push((data(expected), data(input)));
    }
    pairs.push((data("containerd-v2.toml"), data("containerd-v3.toml")));
    pairs.push((b"a\nb\nc\n".to_vec(), b"a\nb\nc".to_vec()));
    pairs.push((b"x\n".to_vec(), b"".to_vec()));
    let long: String = (0..40).map(|i| format!("line {i}\n")).collect();
    let edited = long
        .replace("line 2\n", "line two\n")
        .replace("line 9\n", "")
        .replace("line 30\n", "line 30\nnew\n");
    pairs.push((long.into_bytes(), edited.into_bytes()));
    pairs
}

#[test]
fn unified_diff_matches_gnu_diff() {
    // Where the minimal alignment is unique (one block added or removed, the synthetic
    // cases), the output is exactly GNU's.
    let pairs = diff_pairs();
    let unique: Vec<usize> = (0..MAIN_CASES.len())
        .filter(|&k| !MAIN_CASES[k].3 && !MAIN_CASES[k].4)
        .flat_map(|k| [2 * k, 2 * k + 1])
        .chain(pairs.len() - 3..pairs.len())
        .collect();
    for k in unique {
        let (before, after) = &pairs[k];
        assert_eq!(our_diff(before, after), gnu_diff(before, after), "pair {k}");
    }
}

#[test]
fn unified_diff_is_minimal_and_applies() {
    // Where several minimal alignments exist, GNU's Myers search may pick another one; ours
    // must be no bigger than GNU's and turn `before` into `after` under GNU patch.
    for (before, after) in diff_pairs() {
        let ours = Edit::write(PathBuf::from("/etc/x"), Some(before.clone()), after.clone())
            .unified_diff();
        // GNU's heuristics (discarding "confusing" lines) can cost it a line or two on very
        // different files; ours is an exact LCS, never bigger.
        let (o, g) = (
            churn(&our_diff(&before, &after)),
            churn(&gnu_diff(&before, &after)),
        );
        assert!(
            o.0 <= g.0 && o.1 <= g.1 && o.0 + g.1 == g.0 + o.1,
            "{o:?} vs GNU {g:?}"
        );
        assert_eq!(patched(&before, &ours), after);
    }
}

#[test]
fn diff_headers_for_new_and_deleted_files() {
    let new = Edit::write(
        PathBuf::from("/etc/crio/crio.conf.d/99-nvidia.toml"),
        None,
        b"a\n".to_vec(),
    );
    assert_eq!(
        new.unified_diff(),
        "--- /dev/null\n+++ b/etc/crio/crio.conf.d/99-nvidia.toml\n@@ -0,0 +1 @@\n+a\n"
    );
    let gone = Edit::remove(PathBuf::from("/x"), Some(b"a\nb\n".to_vec()));
    assert_eq!(
        gone.unified_diff(),
        "--- a/x\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n"
    );
}

// ---- several runtimes, backups, concurrency ----

fn named(name: &str) -> Options {
    Options {
        runtime_name: name.into(),
        ..opts(false, false)
    }
}

/// configure (or unconfigure) the file at `path` as `gpuctk runtime configure` does: lock, read,
/// compute, apply.
fn run_locked(
    engine: Engine,
    path: &Path,
    o: &Options,
    remove: bool,
) -> Vec<gpuctk_engines::Applied> {
    let _lock =
        gpuctk_engines::ConfigLock::acquire(path, gpuctk_engines::lock::DEFAULT_TIMEOUT).unwrap();
    let cur = gpuctk_engines::read_optional(path).unwrap();
    let edits = if remove {
        gpuctk_engines::unconfigure(engine, path, cur.as_deref(), o)
    } else {
        gpuctk_engines::configure(engine, path, cur.as_deref(), o)
    }
    .unwrap();
    let changing: Vec<Edit> = edits.into_iter().filter(|e| !e.is_noop()).collect();
    apply(&changing).unwrap()
}

/// The file holding our runtimes for a config at `path`.
fn runtimes_file(engine: Engine, path: &Path) -> PathBuf {
    match engine {
        Engine::Crio => gpuctk_engines::crio::drop_in_path(path),
        _ => path.to_path_buf(),
    }
}

fn has_runtime(engine: Engine, text: &str, name: &str) -> bool {
    match engine {
        Engine::Docker => {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            v["runtimes"][name]["path"] == BIN
        }
        Engine::Containerd => text.contains(&format!(".runtimes.{name}]")),
        Engine::Crio => text.contains(&format!("[crio.runtime.runtimes.{name}]")),
    }
}

#[test]
fn backup_keeps_the_users_original_after_two_runs() {
    // Regression: the second run replaced the .bak with the first run's output.
    for (engine, file, fixture) in [
        (Engine::Docker, "daemon.json", "daemon.json"),
        (Engine::Containerd, "config.toml", "containerd-v2.toml"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(file);
        let orig = data(fixture);
        fs::write(&p, &orig).unwrap();
        let bak = d.path().join(format!("{file}.bak"));
        let first = run_locked(engine, &p, &named("a"), false);
        assert_eq!(first.len(), 1);
        assert_eq!(
            first[0].backup,
            gpuctk_engines::Backup::Written(bak.clone())
        );
        let second = run_locked(engine, &p, &named("b"), false);
        assert_eq!(second[0].backup, gpuctk_engines::Backup::Kept(bak.clone()));
        let third = run_locked(engine, &p, &named("a"), true);
        assert_eq!(third[0].backup, gpuctk_engines::Backup::Kept(bak.clone()));
        assert_eq!(
            fs::read(&bak).unwrap(),
            orig,
            "{engine}: the .bak is the original"
        );
        let text = fs::read_to_string(&p).unwrap();
        assert!(has_runtime(engine, &text, "b") && !has_runtime(engine, &text, "a"));
    }
}

#[test]
fn a_new_file_reports_no_backup_and_a_non_file_backup_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("daemon.json");
    let done = run_locked(Engine::Docker, &p, &named("a"), false);
    assert_eq!(done[0].backup, gpuctk_engines::Backup::None);
    assert!(!d.path().join("daemon.json.bak").exists());

    // A directory where the backup goes: nothing is written, and the message says so.
    fs::create_dir(d.path().join("daemon.json.bak")).unwrap();
    let before = fs::read(&p).unwrap();
    let cur = gpuctk_engines::read_optional(&p).unwrap();
    let edits = gpuctk_engines::configure(Engine::Docker, &p, cur.as_deref(), &named("b")).unwrap();
    let e = apply(&edits).unwrap_err().to_string();
    assert!(
        e.contains("daemon.json.bak") && e.contains("nothing was written"),
        "{e}"
    );
    assert_eq!(fs::read(&p).unwrap(), before);
}

#[test]
fn crio_drop_in_holds_every_configured_runtime() {
    // Regression: each configure rewrote the drop-in with its runtime only.
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("crio.conf");
    fs::write(&main, data("crio.conf")).unwrap();
    let drop_in = d.path().join("crio.conf.d/99-nvidia.toml");
    for n in ["a", "b", "c"] {
        run_locked(Engine::Crio, &main, &named(n), false);
    }
    let mut def = named("b");
    def.set_as_default = true;
    run_locked(Engine::Crio, &main, &def, false);
    let text = fs::read_to_string(&drop_in).unwrap();
    for n in ["a", "b", "c"] {
        assert!(has_runtime(Engine::Crio, &text, n), "{n}:\n{text}");
    }
    assert!(text.contains("default_runtime = \"b\""), "{text}");
    assert!(text.contains("monitor_path"), "copied settings: {text}");
    // Idempotent with several runtimes in the file.
    let cur = fs::read(&main).unwrap();
    let again = configure_with(
        Engine::Crio,
        &main,
        Some(&cur),
        &named("a"),
        &gpuctk_engines::read_optional,
    )
    .unwrap();
    assert!(again[0].is_noop(), "{}", again[0].unified_diff());
    // The temp name of a rewrite lives outside crio.conf.d, which CRI-O loads whole.
    assert_eq!(again[0].staging.as_deref(), Some(d.path()));

    // unconfigure removes one runtime at a time (and the default naming it); the last one
    // takes the drop-in with it.
    run_locked(Engine::Crio, &main, &named("b"), true);
    let text = fs::read_to_string(&drop_in).unwrap();
    assert!(!has_runtime(Engine::Crio, &text, "b") && !text.contains("default_runtime"));
    assert!(has_runtime(Engine::Crio, &text, "a") && has_runtime(Engine::Crio, &text, "c"));
    let _: toml_edit::DocumentMut = text.parse().unwrap();
    run_locked(Engine::Crio, &main, &named("a"), true);
    run_locked(Engine::Crio, &main, &named("c"), true);
    assert!(!drop_in.exists());
    assert_eq!(
        fs::read_dir(d.path().join("crio.conf.d")).unwrap().count(),
        0
    );
}

#[test]
fn containerd_drop_in_holds_every_configured_runtime() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("config.toml");
    let orig = data("containerd-v2-imports.toml")
        .into_iter()
        .collect::<Vec<u8>>();
    let text = String::from_utf8(orig).unwrap().replace(
        "/etc/containerd/conf.d",
        &d.path().join("conf.d").display().to_string(),
    );
    fs::write(&main, &text).unwrap();
    for n in ["a", "b"] {
        run_locked(Engine::Containerd, &main, &named(n), false);
    }
    let drop_in = d.path().join("conf.d/99-nvidia.toml");
    let got = fs::read_to_string(&drop_in).unwrap();
    assert!(has_runtime(Engine::Containerd, &got, "a"), "{got}");
    assert!(has_runtime(Engine::Containerd, &got, "b"), "{got}");
    assert_eq!(
        fs::read_to_string(&main).unwrap(),
        text,
        "main file untouched"
    );
    run_locked(Engine::Containerd, &main, &named("a"), true);
    let got = fs::read_to_string(&drop_in).unwrap();
    assert!(
        !has_runtime(Engine::Containerd, &got, "a") && has_runtime(Engine::Containerd, &got, "b")
    );
    run_locked(Engine::Containerd, &main, &named("b"), true);
    assert!(!drop_in.exists());
}

#[test]
fn configure_in_parallel_loses_no_runtime() {
    // Regression: concurrent runs each wrote their edit of the same old content.
    for engine in [Engine::Docker, Engine::Containerd, Engine::Crio] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(match engine {
            Engine::Docker => "daemon.json",
            Engine::Containerd => "config.toml",
            Engine::Crio => "crio.conf",
        });
        std::thread::scope(|s| {
            for i in 0..16 {
                let p = &p;
                s.spawn(move || run_locked(engine, p, &named(&format!("rt{i}")), false));
            }
        });
        let text = fs::read_to_string(runtimes_file(engine, &p)).unwrap();
        for i in 0..16 {
            assert!(
                has_runtime(engine, &text, &format!("rt{i}")),
                "{engine} rt{i}:\n{text}"
            );
        }
        let leftovers: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| gpuctk_atomicfile::is_temp_name(n))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

#[test]
fn errors_say_what_state_the_file_is_in() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("config.toml");
    fs::write(&p, data("containerd-v2.toml")).unwrap();
    let edits = read_edits(Engine::Containerd, &p, &opts(false, false));
    fs::write(&p, b"version = 2\n").unwrap();
    let e = apply(&edits).unwrap_err().to_string();
    assert!(e.contains("nothing was written"), "{e}");
    // A rename that cannot happen (a directory in the way) leaves the file unchanged.
    let q = d.path().join("daemon.json");
    fs::create_dir(&q).unwrap();
    fs::write(q.join("x"), b"").unwrap();
    let edit = Edit::write(q.clone(), None, b"{}".to_vec());
    // `before` says absent but a directory is there: the check reads it and fails.
    let e = apply(&[edit]).unwrap_err().to_string();
    assert!(e.contains(&q.display().to_string()), "{e}");
}

// ---- --drop-in-config ----

fn with_drop_in(path: &Path) -> Options {
    Options {
        drop_in: Some(path.to_path_buf()),
        ..opts(false, false)
    }
}

/// Every file under `dir` with its bytes, sorted.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
                out.push((p, b"<dir>".to_vec()));
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn containerd_explicit_drop_in_is_imported_and_undone_exactly() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("etc/containerd/config.toml");
    std::fs::create_dir_all(main.parent().unwrap()).unwrap();
    let original = data("containerd-v2.toml");
    std::fs::write(&main, &original).unwrap();
    let drop_in = d.path().join("etc/containerd/conf.d/99-nvidia.toml");
    let o = with_drop_in(&drop_in);

    let done = run_locked(Engine::Containerd, &main, &o, false);
    assert_eq!(done.len(), 2, "{done:?}");
    let text = String::from_utf8(std::fs::read(&main).unwrap()).unwrap();
    // The import, relative to the main config's directory, and nothing else of the main file.
    assert!(
        text.contains("imports = [\"conf.d/99-nvidia.toml\"]"),
        "{text}"
    );
    // The fixture's `imports = []` (what `containerd config default` writes) gets our entry.
    let want = String::from_utf8(original.clone())
        .unwrap()
        .replace("imports = []", "imports = [\"conf.d/99-nvidia.toml\"]");
    assert_bytes("main with the import", text.as_bytes(), want.as_bytes());
    let dropped = String::from_utf8(std::fs::read(&drop_in).unwrap()).unwrap();
    assert!(
        dropped.starts_with(gpuctk_engines::OURS_HEADER),
        "{dropped}"
    );
    assert!(
        has_runtime(Engine::Containerd, &dropped, "nvidia"),
        "{dropped}"
    );
    // The main file's CRI settings are repeated (containerd 1.x replaces the plugin table).
    assert!(dropped.contains("SystemdCgroup"), "{dropped}");

    // Again: nothing to do. Another name: added next to ours, the import not repeated.
    let again: Vec<Edit> = read_edits(Engine::Containerd, &main, &o)
        .into_iter()
        .filter(|e| !e.is_noop())
        .collect();
    assert!(again.is_empty(), "{again:?}");
    let other = Options {
        runtime_name: "nvidia-cdi".into(),
        ..o.clone()
    };
    run_locked(Engine::Containerd, &main, &other, false);
    let text2 = String::from_utf8(std::fs::read(&main).unwrap()).unwrap();
    assert_eq!(text2, text);
    let dropped = String::from_utf8(std::fs::read(&drop_in).unwrap()).unwrap();
    assert!(
        has_runtime(Engine::Containerd, &dropped, "nvidia"),
        "{dropped}"
    );
    assert!(
        has_runtime(Engine::Containerd, &dropped, "nvidia-cdi"),
        "{dropped}"
    );

    // Undo both: the drop-in goes with the last one, and the main file is its original bytes.
    run_locked(Engine::Containerd, &main, &o, true);
    assert!(drop_in.exists());
    assert_eq!(std::fs::read_to_string(&main).unwrap(), text);
    run_locked(Engine::Containerd, &main, &other, true);
    assert!(!drop_in.exists());
    assert_bytes(
        "main after unconfigure",
        &std::fs::read(&main).unwrap(),
        &original,
    );
    assert_bytes(
        "the backup",
        &std::fs::read(d.path().join("etc/containerd/config.toml.bak")).unwrap(),
        &original,
    );
}

#[test]
fn containerd_explicit_drop_in_with_existing_imports_and_no_main() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("config.toml");
    // An import list of the admin's: ours is appended, and removed alone.
    let original = b"version = 2\nimports = [\"/opt/other.toml\"]\n\n[plugins]\n".to_vec();
    std::fs::write(&main, &original).unwrap();
    let drop_in = d.path().join("gpu/50-gpu.toml");
    let o = with_drop_in(&drop_in);
    run_locked(Engine::Containerd, &main, &o, false);
    let text = std::fs::read_to_string(&main).unwrap();
    assert!(
        text.contains("imports = [\"/opt/other.toml\", \"gpu/50-gpu.toml\"]"),
        "{text}"
    );
    run_locked(Engine::Containerd, &main, &o, true);
    assert_bytes("main", &std::fs::read(&main).unwrap(), &original);

    // A glob import already covering the drop-in: the main file is left alone.
    let globbed = b"version = 2\nimports = [\"gpu/*.toml\"]\n".to_vec();
    std::fs::write(&main, &globbed).unwrap();
    run_locked(Engine::Containerd, &main, &o, false);
    assert_bytes("main", &std::fs::read(&main).unwrap(), &globbed);
    assert!(drop_in.exists());
    run_locked(Engine::Containerd, &main, &o, true);
    assert!(!drop_in.exists());

    // No main config at all: one holding the import.
    let e = tempfile::tempdir().unwrap();
    let main = e.path().join("config.toml");
    let drop_in = e.path().join("conf.d/99-nvidia.toml");
    run_locked(Engine::Containerd, &main, &with_drop_in(&drop_in), false);
    assert!(drop_in.exists());
    assert_eq!(
        std::fs::read_to_string(&main).unwrap(),
        "version = 2\nimports = [\"conf.d/99-nvidia.toml\"] # added by `gpuctk runtime configure --drop-in-config`\n"
    );
    // ...removed whole by unconfigure, which leaves the main config empty.
    run_locked(Engine::Containerd, &main, &with_drop_in(&drop_in), true);
    assert_eq!(std::fs::read_to_string(&main).unwrap(), "version = 2\n");
    // A file without the key: the key, marked, comes and goes.
    let plain = b"version = 2\n\n[plugins]\n".to_vec();
    std::fs::write(&main, &plain).unwrap();
    run_locked(Engine::Containerd, &main, &with_drop_in(&drop_in), false);
    assert!(std::fs::read_to_string(&main)
        .unwrap()
        .contains("imports = [\"conf.d/99-nvidia.toml\"] # added by"));
    run_locked(Engine::Containerd, &main, &with_drop_in(&drop_in), true);
    assert_bytes("main", &std::fs::read(&main).unwrap(), &plain);
    assert!(!drop_in.exists());
}

#[test]
fn crio_explicit_drop_in_and_docker_refuses_one() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("crio.conf");
    std::fs::write(&main, data("crio.conf")).unwrap();
    let before = tree(d.path());
    let drop_in = d.path().join("crio.conf.d/50-gpu.toml");
    let o = with_drop_in(&drop_in);
    run_locked(Engine::Crio, &main, &o, false);
    let text = std::fs::read_to_string(&drop_in).unwrap();
    assert!(has_runtime(Engine::Crio, &text, "nvidia"), "{text}");
    assert!(!gpuctk_engines::crio::drop_in_path(&main).exists());
    run_locked(Engine::Crio, &main, &o, true);
    assert!(!drop_in.exists());
    std::fs::remove_dir(drop_in.parent().unwrap()).unwrap();
    assert_eq!(tree(d.path()), before);

    let e = gpuctk_engines::configure(Engine::Docker, Path::new("/d.json"), None, &o).unwrap_err();
    assert!(
        e.to_string().contains("docker reads no drop-in files"),
        "{e}"
    );
}

/// The CRI passes only the annotations `container_annotations` names; the device plugin's CDI
/// requests must reach our shim (the CRI tests show containerd 1.6 dropping them otherwise).
/// Patterns already there (copied from runc) are kept, ours added once.
#[test]
fn containerd_passes_cdi_annotations_to_our_runtime() {
    let orig = b"version = 2
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]
  runtime_type = \"io.containerd.runc.v2\"
  container_annotations = [\"io.example/*\"]
";
    let o = opts(false, false);
    let edits = conf(Engine::Containerd, "/c.toml", Some(orig), &o);
    let after = String::from_utf8(edits[0].after.clone()).unwrap();
    assert!(
        after.ends_with(
            "  container_annotations = [\"io.example/*\", \"cdi.k8s.io/*\"]

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]
  BinaryName = \"/usr/bin/nvidia-container-runtime\"
"
        ),
        "{after}"
    );
    assert!(after.starts_with(std::str::from_utf8(orig).unwrap()));
    let again = conf(Engine::Containerd, "/c.toml", Some(&edits[0].after), &o);
    assert!(again[0].is_noop(), "added once");

    let bad = b"version = 2
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]
  container_annotations = \"cdi.k8s.io/*\"
";
    let e = configure_with(
        Engine::Containerd,
        Path::new("/c.toml"),
        Some(bad),
        &o,
        &no_files,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "/c.toml: `plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.container_annotations` is a string, expected an array of strings (fix or remove it)"
    );
}

// ---- the ledger of settings configure changed (gpuctk_engines::added) ----

fn with_flags(name: &str, set_as_default: bool, enable_cdi: bool) -> Options {
    Options {
        runtime_name: name.into(),
        ..opts(set_as_default, enable_cdi)
    }
}

fn json_at(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

#[test]
fn docker_unconfigure_puts_back_exactly_what_configure_changed() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("daemon.json");
    let ledger = gpuctk_engines::added::ledger_path(&p);
    let original = "{\n    \"log-level\": \"warn\",\n    \"default-runtime\": \"crun\"\n}\n";
    fs::write(&p, original).unwrap();

    // Two runtimes, each as default with CDI: the second default replaces the first.
    run_locked(Engine::Docker, &p, &with_flags("a", true, true), false);
    run_locked(Engine::Docker, &p, &with_flags("b", true, true), false);
    let v = json_at(&p);
    assert_eq!(v["default-runtime"], "b");
    assert_eq!(v["features"]["cdi"], true);
    assert!(ledger.is_file());
    // Unconfigure the first: b stays the default, CDI stays on (b asked for it too).
    run_locked(Engine::Docker, &p, &with_flags("a", false, false), true);
    let v = json_at(&p);
    assert_eq!(v["default-runtime"], "b");
    assert_eq!(v["features"]["cdi"], true);
    assert!(v["runtimes"].get("a").is_none());
    // Unconfigure the second: the user's crun is the default again, where it was, and CDI is
    // gone; so is the ledger.
    run_locked(Engine::Docker, &p, &with_flags("b", false, false), true);
    assert_eq!(fs::read_to_string(&p).unwrap(), original);
    assert!(!ledger.exists(), "no ledger left behind");
    assert_eq!(
        fs::read_to_string(d.path().join("daemon.json.bak")).unwrap(),
        original,
        "the .bak keeps the user's original"
    );
    assert!(!d.path().join("daemon.json.gpuctk-added.json.bak").exists());
}

#[test]
fn docker_keeps_the_users_own_cdi_and_a_value_changed_since() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("daemon.json");
    let ledger = gpuctk_engines::added::ledger_path(&p);
    // The user's own features.cdi: configure finds it on and records nothing.
    let own = "{\n    \"features\": {\n        \"cdi\": true\n    }\n}\n";
    fs::write(&p, own).unwrap();
    run_locked(
        Engine::Docker,
        &p,
        &with_flags("nvidia", false, true),
        false,
    );
    assert!(!ledger.exists());
    run_locked(Engine::Docker, &p, &with_flags("nvidia", false, true), true);
    assert_eq!(fs::read_to_string(&p).unwrap(), own);

    // Ours, then changed by the admin: their value stays.
    let p2 = d.path().join("other/daemon.json");
    run_locked(
        Engine::Docker,
        &p2,
        &with_flags("nvidia", true, true),
        false,
    );
    assert!(
        !d.path().join("other/daemon.json.bak").exists(),
        "created from nothing: no .bak"
    );
    let mut v = json_at(&p2);
    v["features"]["cdi"] = false.into();
    fs::write(&p2, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    run_locked(Engine::Docker, &p2, &with_flags("nvidia", true, true), true);
    let v = json_at(&p2);
    assert_eq!(v["features"]["cdi"], false, "{v}");
    assert!(v.get("default-runtime").is_none(), "{v}");
    assert!(v.get("runtimes").is_none(), "{v}");
    assert!(!gpuctk_engines::added::ledger_path(&p2).exists());
}

#[test]
fn default_chain_unwinds_in_either_order() {
    for first_out in ["a", "b"] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        let orig = data("containerd-v2.toml");
        fs::write(&p, &orig).unwrap();
        run_locked(Engine::Containerd, &p, &with_flags("a", true, true), false);
        run_locked(Engine::Containerd, &p, &with_flags("b", true, true), false);
        let text = fs::read_to_string(&p).unwrap();
        assert!(text.contains("default_runtime_name = \"b\""), "{text}");
        run_locked(Engine::Containerd, &p, &named(first_out), true);
        let text = fs::read_to_string(&p).unwrap();
        let want_default = if first_out == "a" { "b" } else { "a" };
        assert!(
            text.contains(&format!("default_runtime_name = \"{want_default}\"")),
            "{first_out} out first:\n{text}"
        );
        assert!(text.contains("enable_cdi = true"), "{text}");
        run_locked(Engine::Containerd, &p, &named(want_default), true);
        assert_bytes("chain", &fs::read(&p).unwrap(), &orig);
        assert!(!gpuctk_engines::added::ledger_path(&p).exists());
    }
}

#[test]
fn containerd_drop_in_default_goes_back_to_the_main_files() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("config.toml");
    let text = String::from_utf8(data("containerd-v2-imports.toml"))
        .unwrap()
        .replace(
            "/etc/containerd/conf.d",
            &d.path().join("conf.d").to_string_lossy(),
        );
    fs::write(&main, &text).unwrap();
    run_locked(
        Engine::Containerd,
        &main,
        &with_flags("a", true, true),
        false,
    );
    run_locked(Engine::Containerd, &main, &named("b"), false);
    let drop_in = d.path().join("conf.d/99-nvidia.toml");
    let got = fs::read_to_string(&drop_in).unwrap();
    assert!(got.contains("default_runtime_name = \"a\""), "{got}");
    run_locked(Engine::Containerd, &main, &named("a"), true);
    let got = fs::read_to_string(&drop_in).unwrap();
    assert!(has_runtime(Engine::Containerd, &got, "b"), "{got}");
    assert!(got.contains("default_runtime_name = \"runc\""), "{got}");
    assert!(!got.contains("enable_cdi"), "{got}");
    run_locked(Engine::Containerd, &main, &named("b"), true);
    assert!(!drop_in.exists());
    assert_eq!(fs::read_to_string(&main).unwrap(), text);
    assert!(!gpuctk_engines::added::ledger_path(&main).exists());
}

#[test]
fn a_crash_between_ledger_and_config_is_harmless() {
    for engine in [Engine::Docker, Engine::Containerd] {
        let d = tempfile::tempdir().unwrap();
        let (file, fixture) = match engine {
            Engine::Docker => ("daemon.json", "daemon.json"),
            _ => ("config.toml", "containerd-v2.toml"),
        };
        let p = d.path().join(file);
        let orig = data(fixture);
        fs::write(&p, &orig).unwrap();
        let o = with_flags("nvidia", true, true);
        // configure writes the ledger first; stop right after it.
        let edits = read_edits(engine, &p, &o);
        assert!(is_ledger(&edits[0].path), "{engine}: ledger first");
        apply(&edits[..1]).unwrap();
        // unconfigure finds the ledger's values not in the file: it changes nothing there
        // and drops the ledger.
        run_locked(engine, &p, &o, true);
        assert_bytes("crash", &fs::read(&p).unwrap(), &orig);
        assert!(!gpuctk_engines::added::ledger_path(&p).exists());

        // configure complete; unconfigure writes the config first: stop right after it, then
        // run it again.
        run_locked(engine, &p, &o, false);
        let cur = fs::read(&p).unwrap();
        let edits = gpuctk_engines::unconfigure(engine, &p, Some(&cur), &o).unwrap();
        assert!(
            is_ledger(&edits.last().unwrap().path),
            "{engine}: ledger last"
        );
        apply(&edits[..edits.len() - 1]).unwrap();
        run_locked(engine, &p, &o, true);
        assert_bytes("crash 2", &fs::read(&p).unwrap(), &orig);
        assert!(!gpuctk_engines::added::ledger_path(&p).exists());
    }
}

#[test]
fn parallel_configures_with_default_and_cdi_unwind_to_the_original() {
    for (engine, file, fixture) in [
        (Engine::Docker, "daemon.json", "daemon.json"),
        (Engine::Containerd, "config.toml", "containerd-v2.toml"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(file);
        let orig = data(fixture);
        fs::write(&p, &orig).unwrap();
        for remove in [false, true] {
            std::thread::scope(|s| {
                for i in 0..12 {
                    let p = &p;
                    s.spawn(move || {
                        run_locked(
                            engine,
                            p,
                            &with_flags(&format!("rt{i}"), true, true),
                            remove,
                        )
                    });
                }
            });
        }
        assert_bytes(file, &fs::read(&p).unwrap(), &orig);
        assert!(!gpuctk_engines::added::ledger_path(&p).exists());
    }
}

#[test]
fn a_broken_ledger_is_named_with_the_fix() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("daemon.json");
    run_locked(
        Engine::Docker,
        &p,
        &with_flags("nvidia", false, true),
        false,
    );
    fs::write(gpuctk_engines::added::ledger_path(&p), "{").unwrap();
    let cur = fs::read(&p).unwrap();
    let e = gpuctk_engines::unconfigure(Engine::Docker, &p, Some(&cur), &named("nvidia"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("daemon.json.gpuctk-added.json") && e.contains("remove it"),
        "{e}"
    );
}

#[test]
fn a_table_the_user_wrote_stays_even_when_emptied() {
    // An explicit, empty CRI header and an empty docker "features": the user's, kept.
    let toml = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      default_runtime_name = \"runc\"\n";
    let json = "{\n    \"features\": {}\n}\n";
    // And none at all: the tables configure added go with their keys.
    let bare_json = "{\n    \"debug\": true\n}\n";
    let bare_toml = "version = 2\n";
    for (engine, file, text) in [
        (Engine::Containerd, "config.toml", toml),
        (Engine::Containerd, "config.toml", bare_toml),
        (Engine::Docker, "daemon.json", json),
        (Engine::Docker, "daemon.json", bare_json),
    ] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(file);
        fs::write(&p, text).unwrap();
        run_locked(engine, &p, &with_flags("a", true, true), false);
        run_locked(engine, &p, &with_flags("b", true, true), false);
        run_locked(engine, &p, &named("a"), true);
        run_locked(engine, &p, &named("b"), true);
        let got = fs::read_to_string(&p).unwrap();
        if text == bare_toml {
            // The runtimes table configure added keeps its (now empty) parents' place in the
            // plugins tree: only what the ledger records is checked here.
            assert!(
                !got.contains("enable_cdi") && !got.contains("default_runtime_name"),
                "{got}"
            );
        } else {
            assert_eq!(got, text, "{engine}");
        }
        assert!(!gpuctk_engines::added::ledger_path(&p).exists());
    }
}

/// A drop-in outside the main config's directory but under a shared one (a host root): the
/// import goes up with `..`, containerd's lexical join finds it, and a second run sees it.
#[test]
fn containerd_drop_in_beside_the_main_config() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("run/k0s/containerd-cri.toml");
    std::fs::create_dir_all(main.parent().unwrap()).unwrap();
    let original = b"version = 2\n".to_vec();
    std::fs::write(&main, &original).unwrap();
    let drop_in = d.path().join("etc/k0s/containerd.d/nvidia.toml");
    let o = with_drop_in(&drop_in);
    run_locked(Engine::Containerd, &main, &o, false);
    let text = std::fs::read_to_string(&main).unwrap();
    assert!(
        text.contains("imports = [\"../../etc/k0s/containerd.d/nvidia.toml\"]"),
        "{text}"
    );
    let again: Vec<Edit> = read_edits(Engine::Containerd, &main, &o)
        .into_iter()
        .filter(|e| !e.is_noop())
        .collect();
    assert!(again.is_empty(), "{again:?}");
    run_locked(Engine::Containerd, &main, &o, true);
    assert_bytes("main", &std::fs::read(&main).unwrap(), &original);
    assert!(!drop_in.exists());
}

/// Regression: containerd 1.x replaces the main file's CRI table whole with the drop-in's, so
/// the drop-in repeats it; the copy was taken once, and a later edit of the main file's CRI
/// table was hidden from containerd for good, configure saying nothing changed. The copy is
/// now taken again on each configure (and unconfigure of one runtime among several), keeping
/// what is ours: the runtimes, the default configure set, CDI configure turned on.
#[test]
fn containerd_drop_in_follows_the_main_files_cri_table() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("config.toml");
    let text = String::from_utf8(data("containerd-v2-imports.toml"))
        .unwrap()
        .replace(
            "/etc/containerd/conf.d",
            &d.path().join("conf.d").display().to_string(),
        );
    fs::write(&main, &text).unwrap();
    let drop_in = d.path().join("conf.d/99-nvidia.toml");
    run_locked(
        Engine::Containerd,
        &main,
        &Options {
            runtime_name: "a".into(),
            ..opts(true, true)
        },
        false,
    );
    run_locked(Engine::Containerd, &main, &named("b"), false);
    // Tuned by the admin in our own table (`a`'s, the first with a BinaryName): kept.
    let tuned = fs::read_to_string(&drop_in).unwrap().replacen(
        "SystemdCgroup = true\n        BinaryName",
        "SystemdCgroup = true\n        NoPivotRoot = true\n        BinaryName",
        1,
    );
    fs::write(&drop_in, &tuned).unwrap();
    let first = fs::read_to_string(&drop_in).unwrap();
    assert!(first.contains("registry.k8s.io/pause:3.9"), "{first}");
    // Unchanged main file: nothing to write.
    let again = run_locked(Engine::Containerd, &main, &named("b"), false);
    assert!(
        again.is_empty(),
        "{first}\n----\n{}",
        fs::read_to_string(&drop_in).unwrap()
    );

    let edited = text
        .replace("registry.k8s.io/pause:3.9", "registry.example/pause:3.10")
        .replace("SystemdCgroup = true", "SystemdCgroup = false");
    fs::write(&main, &edited).unwrap();
    let done = run_locked(Engine::Containerd, &main, &named("b"), false);
    assert_eq!(done.len(), 1, "the drop-in is refreshed");
    let got = fs::read_to_string(&drop_in).unwrap();
    assert!(
        got.contains("registry.example/pause:3.10") && !got.contains("pause:3.9"),
        "{got}"
    );
    let doc: toml_edit::DocumentMut = got.parse().unwrap();
    let cri = &doc["plugins"]["io.containerd.grpc.v1.cri"];
    let rts = &cri["containerd"]["runtimes"];
    assert_eq!(
        rts["runc"]["options"]["SystemdCgroup"].as_bool(),
        Some(false)
    );
    assert_eq!(rts["a"]["options"]["BinaryName"].as_str(), Some(BIN));
    assert_eq!(rts["b"]["options"]["BinaryName"].as_str(), Some(BIN));
    assert_eq!(rts["a"]["options"]["NoPivotRoot"].as_bool(), Some(true));
    assert_eq!(
        cri["containerd"]["default_runtime_name"].as_str(),
        Some("a")
    );
    assert_eq!(cri["enable_cdi"].as_bool(), Some(true));
    assert!(run_locked(Engine::Containerd, &main, &named("b"), false).is_empty());

    // Unconfiguring one runtime refreshes the copy too; the last one takes the drop-in.
    fs::write(&main, text.replace("pause:3.9", "pause:3.11")).unwrap();
    run_locked(Engine::Containerd, &main, &named("b"), true);
    let got = fs::read_to_string(&drop_in).unwrap();
    assert!(
        got.contains("pause:3.11") && has_runtime(Engine::Containerd, &got, "a"),
        "{got}"
    );
    assert!(!has_runtime(Engine::Containerd, &got, "b"), "{got}");
    run_locked(
        Engine::Containerd,
        &main,
        &Options {
            runtime_name: "a".into(),
            ..opts(true, true)
        },
        true,
    );
    assert!(!drop_in.exists());
}
