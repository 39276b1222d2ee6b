//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) and crash regressions
//! (`fuzz/regressions/<target>/`) through the target bodies, on stable: CI needs no nightly to
//! check that no input that ever mattered panics again.

use std::path::{Path, PathBuf};

use gpuctk_fuzzing::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; an absent folder is an empty list.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| {
                e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                    .path()
            })
            .filter(|p| p.is_file())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    out.sort();
    out
}

/// Runs every input of `target`; a panic names the file to reproduce it with
/// `cargo +nightly fuzz run <target> <file>`.
fn replay(target: &str) -> usize {
    let (_, body) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no target {target} in gpuctk_fuzzing::TARGETS"));
    let corpus = files(&fuzz_dir().join("corpus").join(target));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target}/ is missing or empty: seed it (fuzz/seeds/make-seeds.sh), fuzz, \
         `cargo fuzz cmin {target}` and commit it"
    );
    let regressions = files(&fuzz_dir().join("regressions").join(target));
    for file in corpus.iter().chain(&regressions) {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let result = std::panic::catch_unwind(|| body(&data));
        assert!(result.is_ok(), "{target} panicked on {}", file.display());
    }
    corpus.len() + regressions.len()
}

/// Every `fuzz/fuzz_targets/*.rs` has a body here, and every body a fuzz target: a target added
/// on one side only would never be replayed (or never fuzzed).
#[test]
fn every_fuzz_target_is_replayed() {
    let mut on_disk: Vec<String> = files(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    on_disk.sort();
    let mut known: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    known.sort();
    assert_eq!(on_disk, known);
    let regressions = fuzz_dir().join("regressions");
    for dir in std::fs::read_dir(&regressions).into_iter().flatten() {
        let name = dir.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            known.contains(&name),
            "fuzz/regressions/{name}/ names no target"
        );
    }
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let n = replay(stringify!($name));
                eprintln!("{}: {n} inputs", stringify!($name));
            }
        )*

        /// The list above is complete.
        #[test]
        fn every_target_has_a_replay_test() {
            let mut tested = vec![$(stringify!($name)),*];
            tested.sort();
            let mut known: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
            known.sort();
            assert_eq!(tested, known);
        }
    };
}

replay_tests!(
    ldcache,
    procfs,
    elf,
    cdi_json,
    cdi_yaml,
    request,
    visible_devices,
    capabilities,
    config_toml,
    engine_docker,
    engine_toml,
);
