//! Conformance against binutils' `readelf` on this system's own libraries and programs: the
//! soname, the `DT_NEEDED` list and the interpreter we read are the ones `readelf` prints. Skipped
//! (with a note) where `readelf` is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn readelf(args: &[&str], path: &Path) -> Option<String> {
    let out = Command::new("readelf")
        .args(args)
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The bracketed values of the `readelf -d` lines tagged `(tag)`.
fn dynamic(text: &str, tag: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(&format!("({tag})")))
        .filter_map(|l| Some(l[l.find('[')? + 1..l.rfind(']')?].to_string()))
        .collect()
}

fn have_readelf() -> bool {
    let ok = Command::new("readelf").arg("--version").output().is_ok();
    if !ok {
        eprintln!("readelf is not installed: conformance test skipped");
    }
    ok
}

/// Up to `n` regular ELF files under `dirs`, sorted, so a run is reproducible.
fn elf_files(dirs: &[&str], n: usize) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
                && std::fs::File::open(p).is_ok_and(|f| {
                    let mut magic = [0u8; 4];
                    std::os::unix::fs::FileExt::read_exact_at(&f, &mut magic, 0).is_ok()
                        && &magic == b"\x7fELF"
                })
        })
        .collect();
    out.sort();
    out.truncate(n);
    out
}

#[test]
fn sonames_and_needed_match_readelf() {
    if !have_readelf() {
        return;
    }
    let libs = elf_files(
        &[
            "/lib/x86_64-linux-gnu",
            "/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/lib64",
        ],
        150,
    );
    assert!(!libs.is_empty(), "no system libraries found");
    let mut compared = 0;
    for lib in &libs {
        let Some(text) = readelf(&["-d", "-W"], lib) else {
            continue;
        };
        compared += 1;
        let f = std::fs::File::open(lib).unwrap();
        let info =
            gpuctk_elf::library_info(&f).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
        let object = gpuctk_elf::object(&f).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
        let soname = dynamic(&text, "SONAME").into_iter().next();
        assert_eq!(info.soname, soname, "{}", lib.display());
        assert_eq!(object.soname, soname, "{}", lib.display());
        assert_eq!(object.needed, dynamic(&text, "NEEDED"), "{}", lib.display());
    }
    eprintln!("compared {compared} of {} libraries", libs.len());
    assert!(compared * 2 >= libs.len(), "readelf read too few");
}

#[test]
fn interpreters_match_readelf() {
    if !have_readelf() {
        return;
    }
    let programs = elf_files(&["/usr/bin"], 60);
    assert!(!programs.is_empty(), "no programs in /usr/bin");
    let (mut compared, mut dynamic) = (0, 0);
    for exe in &programs {
        let Some(text) = readelf(&["-l", "-W"], exe) else {
            continue;
        };
        compared += 1;
        let interp = text.lines().find_map(|l| {
            let rest = l.split("Requesting program interpreter: ").nth(1)?;
            Some(rest.trim_end().trim_end_matches(']').to_string())
        });
        let f = std::fs::File::open(exe).unwrap();
        let object = gpuctk_elf::object(&f).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
        dynamic += usize::from(interp.is_some());
        assert_eq!(object.interp, interp, "{}", exe.display());
    }
    eprintln!(
        "compared {compared} of {} programs, {dynamic} with an interpreter",
        programs.len()
    );
    assert!(compared * 2 >= programs.len(), "readelf read too few");
}
