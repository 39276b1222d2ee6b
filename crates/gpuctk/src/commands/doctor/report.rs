//! Doctor's report: a check's status, id, finding and fix, the verdict on an image, and the
//! list every link of the chain adds its checks to. Kept apart from `mod.rs` so that the links
//! use it without importing the module that runs them.

use serde::Serialize;

use gpuctk_host::Roots;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, but something is missing or odd.
    Warn,
    /// Broken: containers will not get their GPUs (or will not start).
    Fail,
}

impl Status {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `group/name`: stable, what scripts match on (docs/cli.md lists them).
    pub id: String,
    /// `driver`, `devices`, `toolkit`, `engines`, `boot` or `image`.
    pub group: &'static str,
    /// A short, stable name within the group, e.g. `kernel-module`.
    pub name: String,
    /// How it came out.
    pub status: Status,
    /// What was found.
    pub found: String,
    /// What to do about it (every `warn` and `fail` has one).
    pub fix: Option<String>,
}

/// Will CUDA start in the image, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `ok`, `warn` or `fail`.
    pub status: Status,
    /// Whether a CUDA program in the image is expected to start.
    pub cuda_starts: bool,
    /// Why.
    pub reason: String,
    /// What to do when it will not.
    pub fix: Option<String>,
}

/// Everything `doctor --json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `fail` when any check failed (or the verdict did), else `warn` when any warned, else `ok`.
    pub status: Status,
    /// The roots the checks read (flags, else the config, else the defaults).
    pub roots: Roots,
    /// The checks in the order run.
    pub checks: Vec<Check>,
    /// The image's verdict, when an image was given.
    pub verdict: Option<Verdict>,
}

/// The findings so far, in the order they are shown.
pub(super) struct Checks(pub(super) Vec<Check>);

impl Checks {
    fn add(
        &mut self,
        group: &'static str,
        name: &str,
        status: Status,
        found: String,
        fix: Option<String>,
    ) {
        self.0.push(Check {
            id: format!("{group}/{name}"),
            group,
            name: name.to_string(),
            status,
            found,
            fix,
        });
    }
    pub(super) fn ok(&mut self, group: &'static str, name: &str, found: impl Into<String>) {
        self.add(group, name, Status::Ok, found.into(), None);
    }
    pub(super) fn fail(
        &mut self,
        g: &'static str,
        n: &str,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.add(g, n, Status::Fail, found.into(), Some(fix.into()));
    }
    pub(super) fn warn(
        &mut self,
        g: &'static str,
        n: &str,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.add(g, n, Status::Warn, found.into(), Some(fix.into()));
    }
}
