//! The discovery snapshot (`[gpuctk] snapshot-dir`): the shim's second create reads it instead
//! of discovering; a driver change rebuilds it; a snapshot that is not ours, is damaged or
//! names a file that is gone is ignored and rebuilt; `cdi generate` writes it. The CDI spec
//! cache next to it: a static-spec create reads it instead of parsing the specs, and any change
//! to a spec file (rewritten, replaced, removed, added) is seen.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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
        self.create_with(|c| c)
    }

    /// [`Snap::create`], the shim's command turned by `wrap` into the one run.
    fn create_with(&self, wrap: impl FnOnce(Command) -> Command) -> Vec<String> {
        self.bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let _ = fs::remove_file(&self.log);
        let out = wrap(self.bed.shim_cmd(&[
            "create",
            "--bundle",
            self.bed.bundle.to_str().unwrap(),
            "snap",
        ]))
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
        self.one_file("snapshot-", "bin")
    }

    /// The one spec cache file.
    fn spec_cache(&self) -> PathBuf {
        self.one_file("cdi-specs-", "json")
    }

    fn one_file(&self, prefix: &str, ext: &str) -> PathBuf {
        let files: Vec<PathBuf> = fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }

    /// Writes a spec file and waits until the spec cache would be written under its identity
    /// (a file changed less than 50 ms before a create is not keyed on: file times move by
    /// clock ticks on some kernels).
    fn put(&self, path: &Path, text: &str) {
        fs::write(path, text).unwrap();
        settle();
    }

    /// One create of a container asking for the CDI devices `names` by env: the log lines it
    /// wrote about the spec cache and its warnings, and the `EXAMPLE_GPU` values it got; or
    /// why it failed.
    fn create_cdi(&self, names: &str) -> Result<(Vec<String>, Vec<String>), String> {
        self.bed
            .set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={names}")]);
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
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(stderr);
        }
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines = log
            .lines()
            .filter(|l| l.contains("spec cache") || l.contains("WARN"))
            .map(str::to_string)
            .collect();
        let got = self.bed.spec()["process"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.as_str()?.strip_prefix("EXAMPLE_GPU="))
            .map(str::to_string)
            .collect();
        Ok((lines, got))
    }
}

/// Past the time a spec file written just now counts as settled.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(60));
}

/// A spec of kind `example.com/gpu` (no fallback to just in time: a name it lacks is
/// unresolvable) whose devices set `EXAMPLE_GPU=<name>-<tag>`.
fn example_spec(tag: &str, names: &[&str]) -> String {
    let devices: Vec<String> = names
        .iter()
        .map(|n| {
            format!(r#"{{"name":"{n}","containerEdits":{{"env":["EXAMPLE_GPU={n}-{tag}"]}}}}"#)
        })
        .collect();
    format!(
        r#"{{"cdiVersion":"0.5.0","kind":"example.com/gpu","devices":[{}]}}"#,
        devices.join(",")
    )
}

fn cache_used(lines: &[String]) -> bool {
    lines.iter().any(|l| l.contains("CDI spec cache used"))
}

fn cache_rebuilt(lines: &[String], why: &str) -> bool {
    lines
        .iter()
        .any(|l| l.contains("CDI spec cache not used") && l.contains(why))
}

fn unresolvable(r: Result<(Vec<String>, Vec<String>), String>, name: &str) {
    let e = r.expect_err(name);
    assert!(
        e.contains(&format!("unresolvable CDI device {name}")),
        "{e}"
    );
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
    // Truncated by its last byte (cut elsewhere, a length may be what says so: the test
    // after this one).
    again(
        &|| fs::write(&file, &good[..good.len() - 1]).unwrap(),
        "cut short",
    );
    // Garbage: an empty shape, a version of one byte, then a byte that is no option's tag.
    again(
        &|| fs::write(&file, b"\x00\x01 not a snapshot").unwrap(),
        "an option tag of 110",
    );
    // Bytes after it.
    again(
        &|| fs::write(&file, [&good[..], b"\0"].concat()).unwrap(),
        "1 bytes after the value",
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
    // A driver version that is not one: as long as the version, so that the lengths before
    // it still hold (the file is strings after their lengths).
    again(
        &|| {
            let (from, to) = (b"570.124.06", b"../../x/yy");
            let mut bad = good.clone();
            let mut n = 0;
            for i in 0..bad.len() - from.len() {
                if &bad[i..i + from.len()] == from {
                    bad[i..i + from.len()].copy_from_slice(to);
                    n += 1;
                }
            }
            assert!(n > 0);
            fs::write(&file, bad).unwrap()
        },
        "is not a driver version",
    );
}

/// Regression (issue 21): the snapshot is written in the compact form (format 4), under a name
/// of its own: what does not read as one whole under that name (the JSON of format 3, a
/// snapshot cut anywhere) is not used, whatever its key says, but rebuilt.
#[test]
fn a_snapshot_that_does_not_read_whole_is_ignored_and_rebuilt() {
    let s = Snap::new();
    s.create();
    assert!(used(&s.create()));
    let file = s.file();
    let good = fs::read(&file).unwrap();
    let json = br#"{"key":{"shape":"gpuctk format 3"},"folders":[],"inventory":{}}"#;
    for (bytes, why) in [
        (json.to_vec(), "a length of 123 is more than"),
        (good[..good.len() - 1].to_vec(), "cut short"),
        (good[..1].to_vec(), "cut short"),
    ] {
        // Written in place: still ours, mode 0600.
        fs::write(&file, &bytes).unwrap();
        let lines = s.create();
        assert!(rebuilt(&lines, why), "{why}: {lines:?}");
        // Rebuilt (not the same bytes: the times it takes are written as numbers of their
        // own length), and whole: the next create reads it.
        assert_ne!(fs::read(&file).unwrap(), bytes);
        assert!(used(&s.create()));
    }
}

/// Regression (issue 21): the shim's update-ldcache takes each mounted library's soname and
/// ABI from discovery, here its snapshot, and does not open the library file: one that no
/// longer reads as ELF (changed without the key moving) still gets its cache entry. Before, the
/// shim read every library again, and that entry was dropped.
#[test]
fn the_shims_ldcache_takes_sonames_from_the_snapshot_not_the_files() {
    let s = Snap::new();
    s.create();
    assert!(used(&s.create()));
    let lib = PathBuf::from(s.bed.host.driver_root())
        .join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.124.06");
    fs::write(&lib, b"not an ELF file any more").unwrap();
    assert!(used(&s.create()));
    let bytes = fs::read(s.bed.bundle.join("rootfs/etc/ld.so.cache")).unwrap();
    let cache = gpuctk_ldcache::parse(&bytes).unwrap();
    assert!(
        cache.entries.iter().any(|e| e.key == "libnvidia-ml.so.1"
            && e.value == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        "{:?}",
        cache.entries
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

/// `c` under `strace -f`, its trace written to `log`.
fn under_strace(c: Command, log: &Path) -> Command {
    let mut s = Command::new("strace");
    s.arg("-f")
        .arg("-o")
        .arg(log)
        .arg("--")
        .arg(c.get_program());
    s.args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    s
}

/// The mount sources of `spec` under the host's driver root `root`.
fn mount_sources(spec: &serde_json::Value, root: &str) -> Vec<String> {
    spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["source"].as_str())
        .filter(|p| p.starts_with(root))
        .map(str::to_string)
        .collect()
}

/// The lines of the trace `text` that name one of `paths`.
fn naming<'t>(text: &'t str, paths: &[String]) -> Vec<&'t str> {
    let quoted: Vec<String> = paths.iter().map(|p| format!("\"{p}\"")).collect();
    text.lines()
        .filter(|l| quoted.iter().any(|q| l.contains(q.as_str())))
        .collect()
}

/// Past the 2 s after which a folder stamped before is vouched for by a snapshot made now.
fn settle_folders() {
    std::thread::sleep(Duration::from_millis(2100));
}

/// Regression (issue 21): a snapshot made when the host's folders had settled vouches for the
/// files it names in them: the next create looks at none of its mount sources or device nodes
/// (one `stat` of each folder instead), whether the shim does the hook work or leaves it to
/// the runtime. Before, each was stat'ed on every create.
#[test]
fn settled_folders_vouch_for_their_files() {
    let s = Snap::new();
    settle_folders();
    s.create();
    let root = s.bed.host.driver_root();
    let dev = s.bed.host.dev_root();
    for hooks_in_shim in [true, false] {
        if !hooks_in_shim {
            s.bed.hooks_as_processes();
        }
        let trace = s.bed.t.join("create.trace");
        let lines = s.create_with(|c| under_strace(c, &trace));
        assert!(used(&lines), "{lines:?}");
        let text = fs::read_to_string(&trace).unwrap();
        let spec = s.bed.spec();
        let mut named = mount_sources(&spec, &root);
        assert!(named.len() >= 10, "{spec}");
        assert!(named.iter().any(|p| p.ends_with("libcuda.so.570.124.06")));
        named.extend(["nvidia0", "nvidia1", "nvidiactl"].map(|n| format!("{dev}/dev/{n}")));
        let seen = naming(&text, &named);
        assert!(seen.is_empty(), "hooks in shim {hooks_in_shim}: {seen:?}");
        // Their folders are what the create looked at.
        let folder = format!("\"{root}/usr/lib/x86_64-linux-gnu\"");
        assert!(
            text.lines()
                .any(|l| l.contains("stat") && l.contains(&folder)),
            "{text}"
        );
    }
}

/// How many files the create's snapshot vouched for, from its debug line; `None` where it used
/// none.
fn vouched_count(lines: &[String]) -> Option<usize> {
    lines.iter().find_map(|l| {
        let (_, rest) = l.split_once("discovery snapshot used (")?;
        rest.split(' ').next()?.parse().ok()
    })
}

/// Regression (issue 21): a snapshot made moments after the driver's folders changed (the
/// refresh unit's `cdi generate` right after a driver install, or the first create after it)
/// vouches for nothing in them. Once they have settled, the next create writes it again, each
/// folder and its files taken again, and the creates after that take the folders' word for
/// their files. Before, every create `stat`ed each mount source until the driver next changed.
#[test]
fn a_snapshot_made_before_its_folders_settled_is_made_again_once_they_have() {
    use std::os::unix::fs::MetadataExt;
    let s = Snap::new();
    let lib_dir = PathBuf::from(s.bed.host.driver_root()).join("usr/lib/x86_64-linux-gnu");
    // As a package upgrade leaves the library folder just before the first create.
    fs::write(lib_dir.join("upgrade.tmp"), b"").unwrap();
    fs::remove_file(lib_dir.join("upgrade.tmp")).unwrap();
    s.create();
    let ino = || fs::metadata(s.file()).unwrap().ino();
    let first = ino();
    assert_eq!(vouched_count(&s.create()), Some(0));
    assert_eq!(ino(), first, "not settled yet: not written again");
    settle_folders();
    // This create still looks at each file, and writes the snapshot again.
    assert_eq!(vouched_count(&s.create()), Some(0));
    let again = ino();
    assert_ne!(again, first);
    let n = vouched_count(&s.create()).unwrap();
    assert!(n >= 10, "{n}");
    assert_eq!(ino(), again, "written once");
    assert_eq!(vouched_count(&s.create()), Some(n));
}

/// Regression (issue 21): a folder the snapshot vouches for that changed is a key that moved.
/// A library removed from it is not mounted: the snapshot is not used, the create discovers
/// again and says which file went. A file added to it rebuilds the snapshot too (a new file
/// discovery might take). Before, an added file left the snapshot in use.
#[test]
fn a_vouched_folder_that_changed_rebuilds_it() {
    let s = Snap::new();
    settle_folders();
    s.create();
    assert!(used(&s.create()));
    let dir = PathBuf::from(s.bed.host.driver_root()).join("usr/lib/x86_64-linux-gnu");
    fs::remove_file(dir.join("libnvidia-ml.so.570.124.06")).unwrap();
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
    assert!(spec.contains("libcuda.so.570.124.06"), "{spec}");
    assert!(used(&s.create()));
    // Past the clock tick of the removal's stamp (a second, on filesystems that keep seconds).
    std::thread::sleep(Duration::from_millis(1100));
    fs::write(dir.join("libnvidia-new.so.1"), b"").unwrap();
    let lines = s.create();
    assert!(
        rebuilt(&lines, "x86_64-linux-gnu: folder changed"),
        "{lines:?}"
    );
    assert!(used(&s.create()));
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
    // Both shapes: with graphics and without (the default container's), the one without
    // taken from the full discovery and equal to what a discovery without graphics gives.
    let mut got: Vec<serde_json::Value> = fs::read_dir(&s.dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .map(|p| serde_json::to_value(gpuctk::read_snapshot_inventory(&p).unwrap()).unwrap())
        .collect();
    let roots = roots_of(&s.bed.host);
    let mut want: Vec<serde_json::Value> = [false, true]
        .into_iter()
        .map(|skip_graphics| {
            let opts = gpuctk_host::DiscoverOptions {
                skip_graphics,
                ..Default::default()
            };
            serde_json::to_value(gpuctk_host::discover(&roots, &opts).unwrap()).unwrap()
        })
        .collect();
    let key = |v: &serde_json::Value| v.to_string();
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_ne!(want[0], want[1]);
    assert_eq!(got, want);
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
    // Nor a spec cache.
    s.put(&s.bed.cdi_dir().join("a.json"), &example_spec("a", &["1"]));
    for _ in 0..2 {
        let (lines, got) = s.create_cdi("example.com/gpu=1").unwrap();
        assert_eq!(got, ["1-a"]);
        assert!(!lines.iter().any(|l| l.contains("spec cache")), "{lines:?}");
    }
    assert!(!s.dir.exists());
}

#[test]
fn static_spec_second_create_reads_the_spec_cache() {
    let s = Snap::new();
    s.put(
        &s.bed.cdi_dir().join("a.json"),
        &example_spec("a", &["1", "2"]),
    );
    let (first, got) = s.create_cdi("example.com/gpu=2").unwrap();
    assert!(cache_rebuilt(&first, "No such file"), "{first:?}");
    assert_eq!(got, ["2-a"]);
    let md = fs::metadata(s.spec_cache()).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o600));
    let spec_first = s.bed.spec();
    let (second, got) = s.create_cdi("example.com/gpu=2").unwrap();
    assert!(cache_used(&second), "{second:?}");
    assert_eq!(got, ["2-a"]);
    assert_eq!(s.bed.spec(), spec_first);
    // Another device of the same vendor: the same cache.
    let (lines, got) = s.create_cdi("example.com/gpu=1").unwrap();
    assert!(cache_used(&lines), "{lines:?}");
    assert_eq!(got, ["1-a"]);
    // The discovery snapshot is another file, and a just-in-time create still reads it.
    s.create();
    assert!(used(&s.create()));
    s.file();
}

#[test]
fn a_spec_rewritten_or_replaced_is_read_again() {
    let s = Snap::new();
    let spec = s.bed.cdi_dir().join("a.json");
    s.put(&spec, &example_spec("a", &["1", "2"]));
    s.create_cdi("example.com/gpu=1").unwrap();
    assert!(cache_used(&s.create_cdi("example.com/gpu=1").unwrap().0));
    let md = fs::metadata(&spec).unwrap();
    let mtime = md.modified().unwrap();
    // Rewritten in place, the same size, device 1 renamed 7, the mtime set back: only the
    // ctime tells.
    fs::write(&spec, example_spec("a", &["7", "2"])).unwrap();
    fs::File::options()
        .write(true)
        .open(&spec)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    settle();
    let now = fs::metadata(&spec).unwrap();
    assert_eq!(
        (now.ino(), now.len(), now.modified().unwrap()),
        (md.ino(), md.len(), mtime)
    );
    unresolvable(s.create_cdi("example.com/gpu=1"), "example.com/gpu=1");
    assert_eq!(s.create_cdi("example.com/gpu=7").unwrap().1, ["7-a"]);
    // Replaced by a rename, the same size and mtime.
    let new = s.bed.t.join("new.json");
    fs::write(&new, example_spec("b", &["1", "2"])).unwrap();
    fs::File::options()
        .write(true)
        .open(&new)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    fs::rename(&new, &spec).unwrap();
    settle();
    let (lines, got) = s.create_cdi("example.com/gpu=1").unwrap();
    assert!(
        cache_rebuilt(&lines, "made for other spec files"),
        "{lines:?}"
    );
    assert_eq!(got, ["1-b"]);
    unresolvable(s.create_cdi("example.com/gpu=7"), "example.com/gpu=7");
}

#[test]
fn a_spec_removed_or_added_is_seen() {
    let s = Snap::new();
    // A second, higher-priority spec dir, absent for now.
    let high = s.bed.t.join("cdi-high");
    let cfg = fs::read_to_string(&s.bed.config).unwrap().replace(
        &format!("spec-dirs = [\"{}\"]", s.bed.cdi_dir().display()),
        &format!(
            "spec-dirs = [\"{}\", \"{}\"]",
            s.bed.cdi_dir().display(),
            high.display()
        ),
    );
    fs::write(&s.bed.config, cfg).unwrap();
    let low = s.bed.cdi_dir().join("a.json");
    s.put(&low, &example_spec("low", &["1"]));
    assert_eq!(s.create_cdi("example.com/gpu=1").unwrap().1, ["1-low"]);
    assert!(cache_used(&s.create_cdi("example.com/gpu=1").unwrap().0));
    // Added, in the dir that now exists: it overrides.
    fs::create_dir(&high).unwrap();
    s.put(&high.join("b.yaml"), &example_spec("high", &["1", "2"]));
    assert_eq!(s.create_cdi("example.com/gpu=1").unwrap().1, ["1-high"]);
    assert_eq!(s.create_cdi("example.com/gpu=2").unwrap().1, ["2-high"]);
    // Removed: the lower one again, then nothing.
    fs::remove_file(high.join("b.yaml")).unwrap();
    assert_eq!(s.create_cdi("example.com/gpu=1").unwrap().1, ["1-low"]);
    unresolvable(s.create_cdi("example.com/gpu=2"), "example.com/gpu=2");
    fs::remove_file(&low).unwrap();
    unresolvable(s.create_cdi("example.com/gpu=1"), "example.com/gpu=1");
}

#[test]
fn a_spec_cache_not_ours_or_damaged_is_ignored_and_rebuilt() {
    let s = Snap::new();
    let spec = s.bed.cdi_dir().join("a.json");
    s.put(&spec, &example_spec("a", &["1", "2"]));
    s.create_cdi("example.com/gpu=2").unwrap();
    let file = s.spec_cache();
    let good = fs::read(&file).unwrap();
    let again = |damage: &dyn Fn(), why: &str| {
        damage();
        let (lines, got) = s.create_cdi("example.com/gpu=2").unwrap();
        assert!(cache_rebuilt(&lines, why), "{why}: {lines:?}");
        assert_eq!(got, ["2-a"]);
        // Rebuilt: ours, whole, used by the next create.
        let md = fs::metadata(&file).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o600));
        assert!(
            cache_used(&s.create_cdi("example.com/gpu=2").unwrap().0),
            "{why}"
        );
    };
    let not_ours = "not a regular file of uid 0";
    again(
        &|| std::os::unix::fs::chown(&file, Some(65534), None).unwrap(),
        not_ours,
    );
    for mode in [0o666, 0o620] {
        again(
            &|| fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap(),
            not_ours,
        );
    }
    again(
        &|| fs::write(&file, &good[..good.len() / 2]).unwrap(),
        "EOF while parsing",
    );
    again(
        &|| fs::write(&file, b"\x00\x01 not json").unwrap(),
        "expected value",
    );
    // The index whole, the edits after it cut short: the device asked for is refused.
    again(
        &|| fs::write(&file, &good[..good.len() - 2]).unwrap(),
        "its edits lie outside the cache",
    );
    again(
        &|| {
            let other = s.bed.t.join("elsewhere.json");
            fs::write(&other, &good).unwrap();
            fs::remove_file(&file).unwrap();
            std::os::unix::fs::symlink(&other, &file).unwrap();
        },
        "symbolic links",
    );
    // A spec that does not validate, under the right key.
    again(
        &|| {
            let text = String::from_utf8(good.clone()).unwrap();
            assert!(text.contains(r#""name":"1""#), "{text}");
            fs::write(&file, text.replace(r#""name":"1""#, r#""name":"1/""#)).unwrap()
        },
        "device name",
    );
    // Made for the spec file as it was: device 2 renamed 3 since.
    s.put(&spec, &example_spec("a", &["1", "3"]));
    fs::write(&file, &good).unwrap();
    let (lines, got) = s.create_cdi("example.com/gpu=3").unwrap();
    assert!(
        cache_rebuilt(&lines, "made for other spec files"),
        "{lines:?}"
    );
    assert_eq!(got, ["3-a"]);
    assert!(cache_used(&s.create_cdi("example.com/gpu=3").unwrap().0));
}

#[test]
fn a_bad_specs_warning_prints_on_the_cached_create_too() {
    let s = Snap::new();
    s.put(&s.bed.cdi_dir().join("a.json"), &example_spec("a", &["1"]));
    // It names the vendor, so it is parsed; its device has no edits.
    s.put(
        &s.bed.cdi_dir().join("bad.json"),
        r#"{"cdiVersion":"0.5.0","kind":"example.com/gpu","devices":[{"name":"x"}]}"#,
    );
    let warnings = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.contains("WARN"))
            .map(|l| l[l.find("WARN").unwrap()..].to_string())
            .collect()
    };
    let (first, got) = s.create_cdi("example.com/gpu=1").unwrap();
    assert_eq!(got, ["1-a"]);
    let w = warnings(&first);
    assert!(
        w.len() == 1 && w[0].contains("bad.json") && w[0].contains("container edits"),
        "{first:?}"
    );
    let (second, _) = s.create_cdi("example.com/gpu=1").unwrap();
    assert!(cache_used(&second), "{second:?}");
    assert_eq!(warnings(&second), w);
}

/// A minimal 32-bit x86 shared object as a driver's i386 library is: ELF header, a `PT_LOAD`
/// and a `PT_DYNAMIC` holding `DT_SONAME` (what ldconfig and discovery read).
fn elf32_library(soname: &str) -> Vec<u8> {
    let strtab = format!("\0{soname}\0");
    let (phoff, dyn_off) = (52u32, 52 + 2 * 32);
    let str_off = dyn_off + 4 * 8;
    let total = str_off + strtab.len() as u32;
    let mut b = Vec::new();
    b.extend_from_slice(b"\x7fELF\x01\x01\x01\0\0\0\0\0\0\0\0\0");
    for v in [3u16, 3] {
        b.extend_from_slice(&v.to_le_bytes()); // ET_DYN, EM_386
    }
    for v in [1u32, 0, phoff, 0, 0] {
        b.extend_from_slice(&v.to_le_bytes()); // version, entry, phoff, shoff, flags
    }
    for v in [52u16, 32, 2, 40, 0, 0] {
        b.extend_from_slice(&v.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    for ph in [
        [1u32, 0, 0, 0, total, total, 6, 0x1000],
        [2, dyn_off, dyn_off, dyn_off, 32, 32, 6, 4],
    ] {
        for v in ph {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    for (tag, val) in [(5u32, str_off), (10, strtab.len() as u32), (14, 1), (0, 0)] {
        b.extend_from_slice(&tag.to_le_bytes());
        b.extend_from_slice(&val.to_le_bytes());
    }
    b.extend_from_slice(strtab.as_bytes());
    b
}

fn roots_of(h: &Host) -> gpuctk_host::Roots {
    gpuctk_host::Roots {
        driver_root: h.driver_root().into(),
        dev_root: h.dev_root().into(),
        proc_root: h.proc_root().into(),
    }
}

/// The compute-only inventory taken from a full discovery equals the one a discovery with
/// `skip_graphics` gives (which `cdi generate` used to run a second time for the runtime's
/// compute-only snapshot), with every option it is asked with; the full one, for the record.
fn assert_without_graphics_is_skip_graphics(h: &Host) -> gpuctk_host::Inventory {
    let roots = roots_of(h);
    let mut full = None;
    for search in [vec![], vec!["/usr/share".to_string()]] {
        let opts = gpuctk_host::DiscoverOptions {
            config_search_paths: search,
            ..Default::default()
        };
        let skip = gpuctk_host::DiscoverOptions {
            skip_graphics: true,
            ..opts.clone()
        };
        let found = gpuctk_host::Discovery::run(&roots, &opts).unwrap();
        let compute = gpuctk_host::discover(&roots, &skip).unwrap();
        assert_eq!(found.without_graphics(), compute);
        // Already without graphics: nothing more to take away.
        let again = gpuctk_host::Discovery::run(&roots, &skip).unwrap();
        assert_eq!(again.without_graphics(), compute);
        assert_eq!(again.inventory, compute);
        full.get_or_insert(found.inventory);
    }
    full.unwrap()
}

/// On a host with everything graphics discovery looks at (DRM nodes and links, vendor files,
/// Xorg modules and configs, `nvoptix.bin`), MIG, 32-bit libraries, a DRM node missing and a
/// by-path link that is not a link (warnings only graphics discovery gives), between them a
/// GPU without its node (a warning both give); and on a host with no graphics at all.
#[test]
fn the_compute_inventory_is_the_full_one_without_graphics() {
    let t = TestDir::new();
    let h = mock_host_with(
        &t,
        "gfx",
        3,
        "570.124.06",
        "debian",
        &["--mig", "0=1g.10gb,1g.10gb"],
    );
    let (root, dev) = (PathBuf::from(h.driver_root()), PathBuf::from(h.dev_root()));
    let put = |rel: &str, bytes: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    };
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    let module = fs::read(lib.join("libnvidia-glcore.so.570.124.06")).unwrap();
    put("usr/lib/xorg/modules/drivers/nvidia_drv.so", &module);
    put(
        "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.124.06",
        &module,
    );
    put(
        "usr/share/X11/xorg.conf.d/10-nvidia.conf",
        b"Section \"OutputClass\"\n    Identifier \"nvidia\"\n    MatchDriver \"nvidia-drm\"\n    Driver \"nvidia\"\nEndSection\n",
    );
    put("usr/share/nvidia/nvoptix.bin", b"\x00\x01\x02\x03");
    // The i386 libraries, in ld.so.cache as ldconfig lists them.
    for name in ["libcuda.so", "libGLX_nvidia.so"] {
        let soname = if name == "libcuda.so" {
            "libcuda.so.1"
        } else {
            "libGLX_nvidia.so.0"
        };
        put(
            &format!("usr/lib/i386-linux-gnu/{name}.570.124.06"),
            &elf32_library(soname),
        );
    }
    put(
        "etc/ld.so.conf.d/i386-linux-gnu.conf",
        b"/usr/lib/i386-linux-gnu\n",
    );
    let ldconfig = std::process::Command::new("ldconfig")
        .arg("-r")
        .arg(&root)
        .output()
        .expect("run ldconfig");
    assert!(ldconfig.status.success(), "{ldconfig:?}");
    fs::remove_file(dev.join("dev/dri/renderD129")).unwrap();
    fs::remove_file(dev.join("dev/nvidia2")).unwrap();
    let bus2 = h.manifest["gpus"][2]["bus_id"]
        .as_str()
        .unwrap()
        .to_string();
    let link = dev.join(format!("dev/dri/by-path/pci-{bus2}-card"));
    fs::remove_file(&link).unwrap();
    fs::write(&link, b"").unwrap();

    let full = assert_without_graphics_is_skip_graphics(&h);
    // What the comparison covers is there in the full inventory.
    assert!(full.gpus.iter().all(|g| !g.drm.is_empty()), "{full:?}");
    assert!(
        full.gpus.iter().any(|g| !g.drm_links.is_empty()),
        "{full:?}"
    );
    for name in [
        "nvidia_drv.so",
        "libglxserver_nvidia.so.570.124.06",
        "10-nvidia.conf",
        "nvoptix.bin",
        "nvidia_icd.json",
        "nvidia.icd",
    ] {
        assert!(
            full.configs.iter().any(|c| c.name == name),
            "{name}: {full:?}"
        );
    }
    if cfg!(target_arch = "x86_64") {
        assert_eq!(
            full.libraries.iter().filter(|l| l.is_32bit).count(),
            2,
            "{:?}",
            full.libraries
        );
    }
    let w = &full.warnings;
    let at = |needle: &str| {
        w.iter()
            .position(|x| x.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {w:?}"))
    };
    // GPU 2's node warning sits between graphics-only ones (GPU 1's DRM node, GPU 2's by-path link).
    assert!(at("renderD129") < at("has no device node"), "{w:?}");
    assert!(at("has no device node") < at("is not a link"), "{w:?}");

    // No graphics at all: no DRM nodes, links or sysfs folders, no vendor files but OpenCL's.
    let h = mock_host(&t, "compute", 2, "570.124.06", "debian");
    let (root, dev) = (PathBuf::from(h.driver_root()), PathBuf::from(h.dev_root()));
    fs::remove_dir_all(dev.join("dev/dri")).unwrap();
    for e in fs::read_dir(dev.join("sys/bus/pci/devices")).unwrap() {
        fs::remove_dir_all(e.unwrap().path().join("drm")).unwrap();
    }
    for rel in [
        "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "etc/vulkan/icd.d/nvidia_icd.json",
    ] {
        fs::remove_file(root.join(rel)).unwrap();
    }
    let full = assert_without_graphics_is_skip_graphics(&h);
    assert!(full.gpus.iter().all(|g| g.drm.is_empty()), "{full:?}");
    assert_eq!(full.configs.len(), 1, "{:?}", full.configs);
}

/// A static-spec create masks the other GPUs' procfs folders from a current discovery snapshot
/// (here written by `cdi generate`), not from every GPU's `information` file (review finding:
/// repeated work on the CDI route). Shown by breaking the other GPU's file after the snapshot:
/// the create still masks its folder; without a snapshot the same create reads the file and
/// says which.
#[test]
fn a_static_spec_create_masks_other_gpus_from_the_snapshot() {
    let s = Snap::new();
    let out = s.bed.cdi_dir().join("nvidia.yaml");
    let mut c = gpuctk(&["cdi", "generate", "--output", out.to_str().unwrap()]);
    c.env("GPUCTK_CONFIG", &s.bed.config);
    for r in s.bed.host.roots().chunks(2) {
        c.args(r);
    }
    ok_command(c, &[]);
    settle();
    let bus1 = s.bed.host.manifest["gpus"][1]["bus_id"]
        .as_str()
        .unwrap()
        .to_string();
    let masked = |s: &Snap| -> Vec<String> {
        s.bed.spec()["linux"]["maskedPaths"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m.as_str())
            .filter(|m| m.starts_with("/proc/driver/nvidia/gpus/"))
            .map(str::to_string)
            .collect()
    };
    let want = [format!("/proc/driver/nvidia/gpus/{bus1}")];
    s.create_cdi("nvidia.com/gpu=0").unwrap();
    assert_eq!(masked(&s), want);
    let info = Path::new(&s.bed.host.proc_root())
        .join("driver/nvidia/gpus")
        .join(&bus1)
        .join("information");
    fs::remove_file(&info).unwrap();
    fs::create_dir(&info).unwrap();
    s.create_cdi("nvidia.com/gpu=0").unwrap();
    assert_eq!(masked(&s), want);
    // Without the snapshots, procfs is read, and the broken file named.
    fs::remove_dir_all(&s.dir).unwrap();
    let cfg = fs::read_to_string(&s.bed.config).unwrap().replace(
        &format!("snapshot-dir = \"{}\"", s.dir.display()),
        "snapshot-dir = \"\"",
    );
    fs::write(&s.bed.config, cfg).unwrap();
    let e = s.create_cdi("nvidia.com/gpu=0").unwrap_err();
    assert!(e.contains(&info.display().to_string()), "{e}");
}

/// Regression (issue 21): the image's libraries the shim's update-ldcache read are kept beside
/// the snapshot (`image-libraries`, by inode, size and times), and a create of the same image
/// takes them from there instead of opening and reading each (an image's library folder
/// holds 50 to 300): here an entry forged in that file reaches the container's cache, which
/// only a create that did not read the library gives. The library changed (its status-change
/// time moves) is read again, and the forged name is gone from the container's cache.
#[test]
fn an_images_libraries_are_read_once() {
    let s = Snap::new();
    s.create();
    let seen = s.dir.join("image-libraries");
    let text = fs::read_to_string(&seen).unwrap();
    assert_eq!(fs::metadata(&seen).unwrap().mode() & 0o777, 0o600);
    let libc = "libc.so.6";
    let line = text
        .lines()
        .find(|l| l.ends_with(&format!(" {libc}")))
        .unwrap_or_else(|| panic!("{text}"))
        .to_string();
    let ino: u64 = line.split(' ').next().unwrap().parse().unwrap();
    let cache_has = |soname: &str| {
        let bytes = fs::read(s.bed.bundle.join("rootfs/etc/ld.so.cache")).unwrap();
        let cache = gpuctk_ldcache::parse(&bytes).unwrap();
        cache.entries.iter().any(|e| e.key == soname)
    };
    assert!(cache_has(libc));
    let forged = line.replace(&format!(" {libc}"), " libforged.so.6");
    fs::write(&seen, text.replace(&line, &forged)).unwrap();
    s.create();
    assert!(cache_has("libforged.so.6"), "the library was read again");
    // The file the line is about: rewritten with the same bytes, a new status-change time.
    let lib = fs::read_dir(s.bed.bundle.join("rootfs/usr/lib/x86_64-linux-gnu"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| fs::symlink_metadata(p).unwrap().ino() == ino)
        .unwrap();
    fs::write(&lib, fs::read(&lib).unwrap()).unwrap();
    s.create();
    assert!(cache_has(libc) && !cache_has("libforged.so.6"));
    let ino = format!("{ino} ");
    let text = fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&ino)).collect();
    assert!(lines.iter().any(|l| l.ends_with(" libc.so.6")), "{lines:?}");
}

/// Regression (issue 21): in a root that persists (a container started again on its old root,
/// enroot's), what the shim's create found in place is kept beside the snapshot
/// (`image-libraries`, its `=` lines: the library folder holding every link asked of it, the
/// `ld.so.cache` holding our entries, the application profile), once each had not changed for
/// 2 s; a later create then reads none of them (no `readlinkat` of a link, no open of the cache
/// or the profile). Whatever changed there since (a link removed, the cache or the profile
/// replaced) has another key, and is done again.
#[test]
fn what_a_root_that_persists_holds_in_place_is_not_looked_at_again() {
    let s = Snap::new();
    s.create();
    let rootfs = s.bed.bundle.join("rootfs");
    let libs = rootfs.join("usr/lib/x86_64-linux-gnu");
    let cache_path = rootfs.join("etc/ld.so.cache");
    let profile = rootfs.join("etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf");
    let link = libs.join("libcuda.so.1");
    let target = fs::read_link(&link).unwrap();
    let (cache, prof) = (fs::read(&cache_path).unwrap(), fs::read(&profile).unwrap());
    let in_place = || {
        fs::read_to_string(s.dir.join("image-libraries"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("= "))
            .count()
    };
    // Made just now: not kept as found in place by the create that finds them so at once.
    s.create();
    assert_eq!(in_place(), 0);
    settle_folders();
    s.create();
    assert_eq!(in_place(), 3);
    let trace = s.bed.t.join("trace");
    s.create_with(|c| under_strace(c, &trace));
    let text = fs::read_to_string(&trace).unwrap();
    let looked: Vec<&str> = text
        .lines()
        .filter(|l| {
            (l.contains("readlinkat(") && l.contains("\"libcuda.so.1\""))
                || (l.contains("open") && l.contains("\"ld.so.cache\""))
                || (l.contains("open") && l.contains("\"10-container.conf\""))
        })
        .collect();
    assert!(looked.is_empty(), "{looked:?}");
    assert_eq!(fs::read_link(&link).unwrap(), target);
    assert_eq!(fs::read(&cache_path).unwrap(), cache);
    assert_eq!(fs::read(&profile).unwrap(), prof);
    // Changed since: the link removed, the cache and the profile replaced by others.
    fs::remove_file(&link).unwrap();
    let mut other = gpuctk_ldcache::parse(&cache).unwrap();
    other.entries.retain(|e| e.key != "libcuda.so.1");
    for (path, bytes) in [(&cache_path, other.to_bytes()), (&profile, b"{}".to_vec())] {
        let tmp = path.with_extension("new");
        fs::write(&tmp, bytes).unwrap();
        fs::set_permissions(&tmp, fs::metadata(path).unwrap().permissions()).unwrap();
        fs::rename(&tmp, path).unwrap();
    }
    s.create();
    assert_eq!(fs::read_link(&link).unwrap(), target);
    assert_eq!(fs::read(&cache_path).unwrap(), cache);
    assert_eq!(fs::read(&profile).unwrap(), prof);
}

/// Regression (issue 21): where a mount covers a path the hooks work on as the two are
/// written (the runtime's `/dev` over the DRM links of a container given graphics), the shim
/// leaves the hooks to the runtime without opening the rootfs, checking it against the host's
/// folders or walking the mounts' destinations in it (about 90 calls, for nothing).
#[test]
fn a_mount_over_the_hooks_paths_as_written_is_seen_without_the_root() {
    let s = Snap::new();
    s.bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=all",
    ]);
    let trace = s.bed.t.join("create.trace");
    let out = under_strace(
        s.bed
            .shim_cmd(&["create", "--bundle", s.bed.bundle.to_str().unwrap(), "snap"]),
        &trace,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let log = fs::read_to_string(&s.log).unwrap();
    assert!(
        log.contains("hooks left to the runtime: a spec mount covers /dev/dri/by-path/"),
        "{log}"
    );
    let spec = s.bed.spec().to_string();
    assert!(spec.contains("create-symlinks"), "{spec}");
    let text = fs::read_to_string(&trace).unwrap();
    let root = s.bed.bundle.join("rootfs");
    let looked: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("openat2(") || l.contains(&format!("\"{}\"", root.display())))
        .filter(|l| !l.contains(&s.dir.display().to_string()))
        .collect();
    assert!(looked.is_empty(), "{looked:?}");
    assert!(
        !text.contains("\"/usr/libexec\""),
        "the host folders were checked"
    );
}

/// Regression (issue 21): a static-spec create checks that the spec still fits the host (each
/// mount source and device node there); a current snapshot whose folders have settled vouches
/// for the files it names, so those cost a `stat` of their folder, not one each (31 calls for a
/// spec of 8 GPUs before).
#[test]
fn a_static_spec_create_stats_no_file_the_snapshot_vouches_for() {
    let s = Snap::new();
    settle_folders();
    let out = s.bed.cdi_dir().join("nvidia.yaml");
    let mut c = gpuctk(&["cdi", "generate", "--output", out.to_str().unwrap()]);
    c.env("GPUCTK_CONFIG", &s.bed.config);
    for r in s.bed.host.roots().chunks(2) {
        c.args(r);
    }
    ok_command(c, &[]);
    settle();
    s.bed.set_env(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]);
    let trace = s.bed.t.join("create.trace");
    let bundle = s.bed.bundle.to_str().unwrap();
    let run = under_strace(
        s.bed.shim_cmd(&["create", "--bundle", bundle, "snap"]),
        &trace,
    );
    ok_command(run, &[]);
    let text = fs::read_to_string(&trace).unwrap();
    let spec = s.bed.spec();
    let root = s.bed.host.driver_root();
    let sources = mount_sources(&spec, &root);
    assert!(
        sources.iter().any(|p| p.ends_with("libcuda.so.570.124.06")),
        "{spec}"
    );
    let seen = naming(&text, &sources);
    assert!(seen.is_empty(), "{seen:?}");
    let folder = format!("\"{root}/usr/lib/x86_64-linux-gnu\"");
    assert!(text
        .lines()
        .any(|l| l.contains("stat") && l.contains(&folder)));
}

/// Regression (issue 21): a create that uses the snapshot asks the kernel for no `geteuid` (the
/// auxiliary vector has it), reads the driver's version file in one read (a one-record procfs
/// file's short read is its end), and looks none of the libraries it mounts up by name in the
/// image's library folder: the folder is listed once and they are answered from the listing.
/// Before: one call more each for the first two, one `openat2` per library for the last.
#[test]
fn a_create_asks_no_euid_reads_the_version_once_and_lists_the_library_folder() {
    let s = Snap::new();
    s.create();
    let trace = s.bed.t.join("create.trace");
    let lines = s.create_with(|c| under_strace(c, &trace));
    assert!(used(&lines), "{lines:?}");
    let text = fs::read_to_string(&trace).unwrap();
    assert!(!text.contains("geteuid"), "{text}");
    // Each open of the version file: one read of its descriptor before its close.
    let calls: Vec<&str> = text
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, c)| c.trim_start()))
        .collect();
    let opens: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.starts_with("open") && c.contains("driver/nvidia/version\""))
        .map(|(i, _)| i)
        .collect();
    assert!(!opens.is_empty(), "{text}");
    for i in opens {
        let fd = calls[i].rsplit("= ").next().unwrap().trim();
        let rest = &calls[i + 1..];
        let end = rest
            .iter()
            .position(|c| c.starts_with(&format!("close({fd})")))
            .unwrap();
        let reads = rest[..end]
            .iter()
            .filter(|c| c.starts_with(&format!("read({fd},")))
            .count();
        assert_eq!(reads, 1, "{:?}", &rest[..end]);
    }
    let spec = s.bed.spec();
    let libs: Vec<String> = spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["destination"].as_str())
        .filter_map(|d| d.strip_prefix("/usr/lib/x86_64-linux-gnu/"))
        .map(str::to_string)
        .collect();
    assert!(libs.len() >= 5, "{spec}");
    let probed: Vec<&str> = naming(&text, &libs)
        .into_iter()
        .filter(|t| t.contains("openat2("))
        .collect();
    assert!(probed.is_empty(), "{probed:?}");
}

/// The shipped static binary's shim create, logging at debug level to a file (issue 21): no
/// `brk` and no signal mask changed, i.e. musl's own malloc never used. tracing-subscriber's
/// thread-local buffer had std register thread-local destructors (`pthread_key_create`) on
/// the first event: two `rt_sigprocmask`, two `brk` and two `mmap` per create.
#[test]
fn the_static_shims_create_with_a_debug_log_leaves_musls_malloc_alone() {
    let s = Snap::new();
    fs::remove_file(&s.bed.shim).unwrap();
    std::os::unix::fs::symlink(crate::ship::static_bin(), &s.bed.shim).unwrap();
    s.create();
    let trace = s.bed.t.join("create.trace");
    let lines = s.create_with(|c| under_strace(c, &trace));
    assert!(used(&lines), "{lines:?}");
    let text = fs::read_to_string(&trace).unwrap();
    // The shim's own calls: those before it execs the runtime (`/bin/true` here).
    let shim: Vec<&str> = text
        .lines()
        .take_while(|l| !l.contains("execve(\"/bin/true\""))
        .collect();
    assert!(shim.len() > 50, "{text}");
    let musl: Vec<&&str> = shim
        .iter()
        .filter(|l| l.contains(" brk(") || l.contains(" rt_sigprocmask("))
        .collect();
    assert!(musl.is_empty(), "{musl:?}\n{text}");
    // Its lines as tracing-subscriber wrote them: `2026-12-05T04:52:19.931608Z DEBUG ...`.
    let log = fs::read_to_string(&s.log).unwrap();
    assert!(log.contains("Z DEBUG "), "{log}");
    for l in log.lines() {
        let (t, rest) = l.split_at_checked(27).unwrap_or(("", l));
        let shape = t.len() == 27 && &t[4..5] == "-" && &t[10..11] == "T" && t.ends_with('Z');
        assert!(shape && rest.starts_with(' '), "{l:?}");
    }
}
