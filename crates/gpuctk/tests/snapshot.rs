//! The discovery snapshot (`[gpuctk] snapshot-dir`): the shim's second create reads it instead
//! of discovering; a driver change rebuilds it; a snapshot that is not ours, is damaged or
//! names a file that is gone is ignored and rebuilt; `cdi generate` writes it.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use crate::runtime::Bed;
use crate::util::*;

/// A bed whose shim logs at debug level to a file and execs `/bin/true` instead of a runtime
/// (the snapshot is the shim's business), with its snapshots in the test's dir.
struct Snap {
    bed: Bed,
    log: PathBuf,
    dir: PathBuf,
}

impl Snap {
    fn new() -> Snap {
        let bed = Bed::new("runc", "debian", 2);
        let log = bed.t.join("shim.log");
        let dir = bed.t.join("snapshots");
        let cfg = fs::read_to_string(&bed.config).unwrap().replace(
            "runtimes = [\"runc\"]\n",
            &format!(
                "runtimes = [\"/bin/true\"]\nlog-level = \"debug\"\ndebug = \"{}\"\n",
                log.display()
            ),
        );
        // `Bed` keeps its snapshots there.
        assert!(cfg.contains(&format!("snapshot-dir = \"{}\"", dir.display())));
        fs::write(&bed.config, cfg).unwrap();
        Snap { bed, log, dir }
    }

    /// One create of a container asking for every GPU; the log lines it wrote about snapshots.
    fn create(&self) -> Vec<String> {
        self.bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let _ = fs::remove_file(&self.log);
        let out = self
            .bed
            .shim_cmd(&[
                "create",
                "--bundle",
                self.bed.bundle.to_str().unwrap(),
                "snap",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The edits are there, whichever way the inventory came.
        let spec = self.bed.spec();
        let nodes = spec["linux"]["devices"].as_array().unwrap();
        assert!(nodes.iter().any(|d| d["path"] == "/dev/nvidia1"), "{spec}");
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("snapshot") || l.contains("WARN"))
            .map(str::to_string)
            .collect()
    }

    /// The one snapshot file of the shim's discovery shape.
    fn file(&self) -> PathBuf {
        let files: Vec<PathBuf> = fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }
}

fn used(lines: &[String]) -> bool {
    lines.iter().any(|l| l.contains("discovery snapshot used"))
}

fn rebuilt(lines: &[String], why: &str) -> bool {
    lines
        .iter()
        .any(|l| l.contains("discovery snapshot not used") && l.contains(why))
}

#[test]
fn second_create_reads_the_snapshot() {
    let s = Snap::new();
    let first = s.create();
    assert!(rebuilt(&first, "No such file"), "{first:?}");
    let md = fs::metadata(s.file()).unwrap();
    assert_eq!(md.mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(&s.dir).unwrap().mode() & 0o777, 0o700);
    let spec_first = s.bed.spec();
    let second = s.create();
    assert!(used(&second), "{second:?}");
    // Same edits either way.
    assert_eq!(s.bed.spec(), spec_first);
}

#[test]
fn a_driver_change_rebuilds_it() {
    let s = Snap::new();
    s.create();
    assert!(used(&s.create()));
    // A new driver: another version file.
    let version = PathBuf::from(s.bed.host.proc_root()).join("driver/nvidia/version");
    let text = fs::read_to_string(&version).unwrap();
    fs::write(&version, text.replace("570.124.06", "570.124.07")).unwrap();
    let lines = s.create();
    assert!(rebuilt(&lines, "another driver"), "{lines:?}");
    fs::write(&version, text).unwrap();
    assert!(rebuilt(&s.create(), "another driver"));
    assert!(used(&s.create()));
    // ldconfig ran on the driver root: the cache's mtime moved.
    let cache = PathBuf::from(s.bed.host.driver_root()).join("etc/ld.so.cache");
    let f = fs::File::options().write(true).open(&cache).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    drop(f);
    let lines = s.create();
    assert!(rebuilt(&lines, "another driver"), "{lines:?}");
    assert!(used(&s.create()));
}

#[test]
fn a_snapshot_not_ours_or_damaged_is_ignored_and_rebuilt() {
    let s = Snap::new();
    s.create();
    let file = s.file();
    let good = fs::read(&file).unwrap();
    let again = |damage: &dyn Fn(), why: &str| {
        damage();
        let lines = s.create();
        assert!(rebuilt(&lines, why), "{why}: {lines:?}");
        // Rebuilt: ours, whole, used by the next create.
        let md = fs::metadata(&file).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o600));
        assert!(used(&s.create()), "{why}");
    };
    // Another owner.
    again(
        &|| std::os::unix::fs::chown(&file, Some(65534), None).unwrap(),
        "not a regular file of uid 0",
    );
    // Writable by others.
    again(
        &|| fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap(),
        "not a regular file of uid 0",
    );
    // Truncated.
    again(
        &|| fs::write(&file, &good[..good.len() / 2]).unwrap(),
        "EOF while parsing",
    );
    // Garbage.
    again(
        &|| fs::write(&file, b"\x00\x01 not json").unwrap(),
        "expected value",
    );
    // A symlink to a snapshot elsewhere is not followed.
    again(
        &|| {
            let other = s.bed.t.join("elsewhere.json");
            fs::write(&other, &good).unwrap();
            fs::remove_file(&file).unwrap();
            std::os::unix::fs::symlink(&other, &file).unwrap();
        },
        "symbolic links",
    );
    // A driver version that is not one.
    again(
        &|| {
            let text = String::from_utf8(good.clone()).unwrap();
            fs::write(&file, text.replace("\"570.124.06\"", "\"../../x\"")).unwrap()
        },
        "is not a driver version",
    );
}

#[test]
fn a_snapshot_that_names_a_file_gone_is_noticed_and_rebuilt() {
    let s = Snap::new();
    s.create();
    assert!(used(&s.create()));
    // A library removed without ldconfig: the key does not see it; the create path does.
    let lib = PathBuf::from(s.bed.host.driver_root())
        .join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.124.06");
    fs::remove_file(&lib).unwrap();
    let lines = s.create();
    assert!(
        lines
            .iter()
            .any(|l| l
                .contains("libnvidia-ml.so.570.124.06: named by the discovery snapshot but gone")),
        "{lines:?}"
    );
    let spec = s.bed.spec().to_string();
    assert!(!spec.contains("libnvidia-ml.so.570"), "{spec}");
    // The same holds with the hooks left to the runtime (nothing opens the mounts then).
    s.bed.hooks_as_processes();
    let lib = PathBuf::from(s.bed.host.driver_root())
        .join("usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.570.124.06");
    assert!(used(&s.create()));
    fs::remove_file(&lib).unwrap();
    let lines = s.create();
    assert!(
        lines
            .iter()
            .any(|l| l
                .contains("libnvidia-cfg.so.570.124.06: named by the discovery snapshot but gone")),
        "{lines:?}"
    );
    assert!(!s.bed.spec().to_string().contains("libnvidia-cfg.so.570"));
}

#[test]
fn cdi_generate_writes_the_runtimes_snapshots() {
    let s = Snap::new();
    let out = s.bed.t.join("nvidia.yaml");
    let mut c = gpuctk(&["cdi", "generate", "--output", out.to_str().unwrap()]);
    c.env("GPUCTK_CONFIG", &s.bed.config);
    for r in s.bed.host.roots().chunks(2) {
        c.args(r);
    }
    ok_command(c, &[]);
    // Both shapes: with graphics and without (the default container's).
    assert_eq!(fs::read_dir(&s.dir).unwrap().count(), 2);
    assert!(used(&s.create()));
}

#[test]
fn no_snapshot_dir_no_snapshot() {
    let s = Snap::new();
    let cfg = fs::read_to_string(&s.bed.config).unwrap().replace(
        &format!("snapshot-dir = \"{}\"", s.dir.display()),
        "snapshot-dir = \"\"",
    );
    fs::write(&s.bed.config, cfg).unwrap();
    let lines = s.create();
    assert!(!lines.iter().any(|l| l.contains("snapshot")), "{lines:?}");
    assert!(!s.dir.exists());
}
