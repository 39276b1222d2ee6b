//! `NVIDIA_DRIVER_CAPABILITIES`: which parts of the driver a container asks for.
//!
//! Two views of one set:
//! - what was **requested** ([`CapabilitySet::requested`], [`CapabilitySet::iter`]): the names
//!   the container (or a flag list) gave, after `all` and the `supported-driver-capabilities`
//!   allow-list;
//! - what is **selected** ([`CapabilitySet::contains`]): the requested capabilities plus the
//!   ones they imply, as libnvidia-container's `configure` flags define them: `--video` is
//!   `OPT_VIDEO_LIBS | OPT_COMPUTE_LIBS` (NVENC/NVDEC sit on top of libcuda), and `--display` is
//!   `OPT_DISPLAY | OPT_GRAPHICS_LIBS` (an X server's client needs GL/EGL). libnvidia-container
//!   keys the UVM device nodes, the MPS pipe directory and the container's CUDA compat libraries
//!   on `OPT_COMPUTE_LIBS`, and the graphics application profile on `OPT_GRAPHICS_LIBS`, so
//!   those follow [`CapabilitySet::contains`] too. The compute *binaries* (MPS control and
//!   server) are `OPT_COMPUTE_BINS`, which only `--compute` sets: ask
//!   [`CapabilitySet::requested`] for them.

use std::collections::BTreeSet;

use gpuctk_host::Capability;

/// A set of driver capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapabilitySet(BTreeSet<Capability>);

/// A bad capability list where every name must be known (command-line flags, the
/// `supported-driver-capabilities` config key). The container's `NVIDIA_DRIVER_CAPABILITIES`
/// never gives this error: see [`CapabilitySet::parse_env`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown driver capability {0:?} (known: all, compute, compat32, graphics, utility, video, display, ngx)")]
pub struct CapabilityError(pub String);

/// The names `NVIDIA_DRIVER_CAPABILITIES` knows, for messages.
const KNOWN: &str = "all, compute, compat32, graphics, utility, video, display, ngx";

/// Longest unknown name quoted back in a warning.
const SHOWN: usize = 40;

fn shown(s: &str) -> String {
    s.chars().take(SHOWN).collect()
}

/// The capabilities `c` brings with it besides itself (libnvidia-container's flag table).
fn implied_by(c: Capability) -> &'static [Capability] {
    match c {
        Capability::Video => &[Capability::Compute],
        Capability::Display => &[Capability::Graphics],
        _ => &[],
    }
}

impl CapabilitySet {
    /// No capability: the driver's device nodes only.
    pub fn empty() -> Self {
        CapabilitySet(BTreeSet::new())
    }

    /// What a container gets when it names none: `utility,compute`, as NVIDIA's default.
    pub fn default_set() -> Self {
        CapabilitySet(
            [Capability::Utility, Capability::Compute]
                .into_iter()
                .collect(),
        )
    }

    /// Every capability (`all`).
    pub fn all() -> Self {
        CapabilitySet(Capability::ALL.into_iter().collect())
    }

    /// Parse a comma list such as `compute,utility` or `all` where every name must be known
    /// (our own flag lists). Empty items are ignored; an empty value means the default set.
    pub fn parse(value: &str) -> Result<Self, CapabilityError> {
        let mut set = BTreeSet::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                return Ok(Self::all());
            }
            set.insert(
                item.parse::<Capability>()
                    .map_err(|_| CapabilityError(shown(item)))?,
            );
        }
        if set.is_empty() {
            return Ok(Self::default_set());
        }
        Ok(CapabilitySet(set))
    }

    /// Parse the container's `NVIDIA_DRIVER_CAPABILITIES` value as NVIDIA's hook reads it:
    /// items split on `,` and trimmed, empty items skipped, `all` anywhere means every
    /// capability. An empty value means the default set (`utility,compute`); a value with no
    /// item (`,`) means none, as NVIDIA's. An unknown name is dropped with a warning that
    /// names it (NVIDIA's hook panics; an image that names a capability from a newer toolkit
    /// still runs here, with what it asked for that we know). Linear in the value's length;
    /// at most one warning per distinct unknown name, each quoting at most 40 characters, and
    /// at most 8 of them.
    pub fn parse_env(value: &str) -> (Self, Vec<String>) {
        if value.is_empty() {
            return (Self::default_set(), Vec::new());
        }
        let mut set = BTreeSet::new();
        let mut all = false;
        let mut unknown: Vec<&str> = Vec::new();
        let mut more = 0usize;
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                all = true;
            } else if let Ok(c) = item.parse::<Capability>() {
                set.insert(c);
            } else if !unknown.contains(&item) {
                if unknown.len() < 8 {
                    unknown.push(item);
                } else {
                    more += 1;
                }
            }
        }
        let mut warnings: Vec<String> = unknown
            .iter()
            .map(|u| {
                format!(
                    "NVIDIA_DRIVER_CAPABILITIES: unknown capability {:?} ignored (known: {KNOWN})",
                    shown(u)
                )
            })
            .collect();
        if more > 0 {
            warnings.push(format!(
                "NVIDIA_DRIVER_CAPABILITIES: {more} more unknown capabilities ignored"
            ));
        }
        let set = if all { Self::all() } else { CapabilitySet(set) };
        (set, warnings)
    }

    /// Parse the `supported-driver-capabilities` config value: `all`, or a comma list of known
    /// names (an empty value allows none, as NVIDIA's). An unknown name is an error, as
    /// NVIDIA's hook refuses to start with one; the caller names the key and line.
    pub fn parse_supported(value: &str) -> Result<Self, CapabilityError> {
        let mut set = BTreeSet::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                return Ok(Self::all());
            }
            set.insert(
                item.parse::<Capability>()
                    .map_err(|_| CapabilityError(shown(item)))?,
            );
        }
        Ok(CapabilitySet(set))
    }

    /// The requested capabilities that are also in `allowed`.
    pub fn intersection(&self, allowed: &CapabilitySet) -> Self {
        CapabilitySet(self.0.intersection(&allowed.0).copied().collect())
    }

    /// Whether `c`'s parts of the driver are selected: `c` was requested, or a requested
    /// capability implies it (`video` brings `compute`, `display` brings `graphics`).
    pub fn contains(&self, c: Capability) -> bool {
        self.0.contains(&c) || self.0.iter().any(|r| implied_by(*r).contains(&c))
    }

    /// Whether `c` itself was requested, implications aside (libnvidia-container gives the
    /// compute binaries only to `compute`, not to `video`).
    pub fn requested(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }

    /// Whether nothing was requested.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The requested capabilities in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }

    /// The selected capabilities (requested and implied) in a stable order.
    pub fn selected(&self) -> impl Iterator<Item = Capability> + '_ {
        Capability::ALL
            .into_iter()
            .filter(|c| self.contains(*c))
            .collect::<BTreeSet<_>>()
            .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &CapabilitySet) -> String {
        s.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
    }

    #[test]
    fn parses() {
        assert_eq!(
            CapabilitySet::parse("").unwrap(),
            CapabilitySet::default_set()
        );
        assert_eq!(CapabilitySet::parse("all").unwrap(), CapabilitySet::all());
        let s = CapabilitySet::parse("utility, ngx").unwrap();
        assert!(s.contains(Capability::Ngx) && !s.contains(Capability::Compute));
        let e = CapabilitySet::parse("compute,gaming").unwrap_err();
        assert!(e.to_string().contains("\"gaming\""));
    }

    #[test]
    fn video_brings_compute_and_display_brings_graphics() {
        let s = CapabilitySet::parse("video").unwrap();
        assert!(s.contains(Capability::Video) && s.contains(Capability::Compute));
        assert!(s.requested(Capability::Video) && !s.requested(Capability::Compute));
        assert!(!s.contains(Capability::Graphics) && !s.contains(Capability::Utility));
        let s = CapabilitySet::parse("display").unwrap();
        assert!(s.contains(Capability::Graphics) && !s.requested(Capability::Graphics));
        assert!(!s.contains(Capability::Compute));
        // Not the other way round.
        let s = CapabilitySet::parse("compute,graphics").unwrap();
        assert!(!s.contains(Capability::Video) && !s.contains(Capability::Display));
        // The requested names are what renders and compares.
        assert_eq!(names(&CapabilitySet::parse("video").unwrap()), "video");
        assert_eq!(
            CapabilitySet::parse("display,video")
                .unwrap()
                .selected()
                .map(|c| c.name())
                .collect::<Vec<_>>(),
            ["compute", "video", "graphics", "display"]
        );
    }

    #[test]
    fn env_unknown_names_are_warnings() {
        let (s, w) = CapabilitySet::parse_env("compute,warp, video,warp");
        assert_eq!(names(&s), "compute,video");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("NVIDIA_DRIVER_CAPABILITIES: unknown capability \"warp\" ignored"),
            "{w:?}"
        );
        // Only unknown names: nothing selected, not the default.
        let (s, w) = CapabilitySet::parse_env("gaming");
        assert!(s.is_empty() && w.len() == 1);
        // `all` wins, unknown names still reported.
        let (s, w) = CapabilitySet::parse_env("all,gaming");
        assert_eq!(s, CapabilitySet::all());
        assert_eq!(w.len(), 1);
        // Empty means the default; a value without items means none (NVIDIA's rule).
        assert_eq!(
            CapabilitySet::parse_env(""),
            (CapabilitySet::default_set(), vec![])
        );
        assert_eq!(
            CapabilitySet::parse_env(" , "),
            (CapabilitySet::empty(), vec![])
        );
        // Case matters, as in NVIDIA's string compare.
        assert_eq!(CapabilitySet::parse_env("Compute").1.len(), 1);
    }

    #[test]
    fn env_warnings_are_bounded() {
        let value: Vec<String> = (0..10_000).map(|i| format!("x{i}")).collect();
        let (s, w) = CapabilitySet::parse_env(&value.join(","));
        assert!(s.is_empty());
        assert_eq!(w.len(), 9, "{w:?}");
        assert!(w[8].contains("9992 more unknown"), "{}", w[8]);
        let long = "y".repeat(10_000);
        let (_, w) = CapabilitySet::parse_env(&long);
        assert!(w[0].len() < 200);
    }

    #[test]
    fn supported_list() {
        assert_eq!(
            CapabilitySet::parse_supported("all").unwrap(),
            CapabilitySet::all()
        );
        assert_eq!(
            CapabilitySet::parse_supported("").unwrap(),
            CapabilitySet::empty()
        );
        let s = CapabilitySet::parse_supported("utility,compute").unwrap();
        assert_eq!(s, CapabilitySet::default_set());
        assert!(CapabilitySet::parse_supported("utility,gaming").is_err());
        let asked = CapabilitySet::parse("compute,video,graphics").unwrap();
        assert_eq!(names(&asked.intersection(&s)), "compute");
        assert_eq!(CapabilitySet::all().intersection(&s), s);
    }
}
