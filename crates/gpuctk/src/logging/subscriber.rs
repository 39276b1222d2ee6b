//! The binary's own `tracing` subscriber: each event written as tracing-subscriber's `fmt` wrote
//! it with our settings (`2026-12-05T04:52:19.931608Z DEBUG message key=value`, or on stderr
//! ` WARN message`, coloured on a terminal), byte for byte.
//!
//! Why not tracing-subscriber: its `fmt` layer formats into a `thread_local!` buffer with a
//! destructor, whose first use makes std register thread-local destructors
//! (`pthread_key_create`: in the static musl build, musl's own malloc's first use, six system
//! calls on the runtime shim's create). Here an event is formatted into a local `String` and
//! written with one `write_all`; nothing on the path uses thread-local storage. Spans are not
//! recorded (the code base logs events only).

use std::fmt::{self, Write as _};
use std::io;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Event, Level, Metadata, Subscriber};

/// Writes each event enabled by `max` as one line to `out`.
pub(super) struct Logger<W> {
    max: LevelFilter,
    /// Where each line's timestamp comes from (`SystemTime::now`); none on stderr.
    clock: Option<fn() -> SystemTime>,
    /// Whether lines are coloured, asked when the first line is written: a create that logs
    /// nothing asks nothing of the terminal (`isatty` is a system call).
    ansi: fn() -> bool,
    ansi_now: std::sync::OnceLock<bool>,
    out: Mutex<W>,
}

impl<W: io::Write + Send + 'static> Logger<W> {
    pub(super) fn new(
        out: W,
        max: Level,
        clock: Option<fn() -> SystemTime>,
        ansi: fn() -> bool,
    ) -> Self {
        Logger {
            max: LevelFilter::from_level(max),
            clock,
            ansi,
            ansi_now: std::sync::OnceLock::new(),
            out: Mutex::new(out),
        }
    }
}

impl<W: io::Write + Send + 'static> Subscriber for Logger<W> {
    /// Decided once per call site: a level above `max` is never asked about again.
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.enabled(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    /// The macros' own level check (`LevelFilter::current`) skips levels above `max`.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event() && *meta.level() <= self.max
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = String::with_capacity(256);
        let now = self.clock.map(|now| now());
        let ansi = *self.ansi_now.get_or_init(self.ansi);
        if format_event(&mut line, event, now, ansi).is_ok() {
            // A poisoned lock still holds a usable writer; a failed write is dropped, as
            // tracing-subscriber dropped it.
            let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = out.write_all(line.as_bytes());
        }
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// One event's line, newline included: tracing-subscriber's `Format<Full, SystemTime>` with
/// `with_target(false)`, and its `DefaultFields`.
fn format_event(
    line: &mut String,
    event: &Event<'_>,
    now: Option<SystemTime>,
    ansi: bool,
) -> fmt::Result {
    if let Some(now) = now {
        if ansi {
            write!(line, "\x1b[2m{}\x1b[0m ", Timestamp(now))?;
        } else {
            write!(line, "{} ", Timestamp(now))?;
        }
    }
    let (name, colour) = match *event.metadata().level() {
        Level::TRACE => ("TRACE", "35"),
        Level::DEBUG => ("DEBUG", "34"),
        Level::INFO => (" INFO", "32"),
        Level::WARN => (" WARN", "33"),
        Level::ERROR => ("ERROR", "31"),
    };
    if ansi {
        write!(line, "\x1b[{colour}m{name}\x1b[0m ")?;
    } else {
        line.push_str(name);
        line.push(' ');
    }
    let mut fields = Fields {
        line: &mut *line,
        ansi,
        empty: true,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    line.push('\n');
    Ok(())
}

/// tracing-subscriber's `DefaultVisitor`: fields apart by a space, `message` bare, the others
/// `name=value` with the value's `Debug` (so a `&str` is quoted); control characters in the
/// message and in errors escaped (its ANSI sanitization, on by default).
struct Fields<'a> {
    line: &'a mut String,
    ansi: bool,
    empty: bool,
    result: fmt::Result,
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let ansi = self.ansi;
        if let Some(source) = value.source() {
            self.record_debug(
                field,
                &format_args!(
                    "{} {}{}{}{}",
                    Escaped(format_args!("{value}")),
                    Styled("3", field.name(), ansi),
                    Styled("3", ".sources", ansi),
                    Styled("2", "=", ansi),
                    Sources(source)
                ),
            )
        } else {
            self.record_debug(field, &format_args!("{}", Escaped(format_args!("{value}"))))
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        if self.empty {
            self.empty = false;
        } else {
            self.line.push(' ');
        }
        let name = field.name();
        self.result = if name == "message" {
            write!(self.line, "{:?}", Escaped(value))
        } else {
            let name = name.strip_prefix("r#").unwrap_or(name);
            write!(
                self.line,
                "{}{}{value:?}",
                Styled("3", name, self.ansi),
                Styled("2", "=", self.ansi)
            )
        };
    }
}

/// Text in one ANSI style (SGR code), as nu-ansi-term paints it; plain without colour.
struct Styled<'a>(&'static str, &'a str, bool);

impl fmt::Display for Styled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.2 {
            write!(f, "\x1b[{}m{}\x1b[0m", self.0, self.1)
        } else {
            f.write_str(self.1)
        }
    }
}

/// The chain of an error's sources: `[source, its source, ...]`.
struct Sources<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Sources<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        let mut next = Some(self.0);
        while let Some(e) = next {
            list.entry(&Escaped(format_args!("{e}")));
            next = e.source();
        }
        list.finish()
    }
}

/// A value with the control characters a terminal acts on written as escapes (`\x1b`,
/// `\u{9b}`), so that a logged path cannot rewrite the screen.
struct Escaped<T>(T);

impl<T: fmt::Debug> fmt::Debug for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapeWriter(f), "{:?}", self.0)
    }
}

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapeWriter(f), "{}", self.0)
    }
}

struct EscapeWriter<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl fmt::Write for EscapeWriter<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                '\u{80}'..='\u{9f}' => write!(self.0, "\\u{{{:x}}}", c as u32)?,
                c => self.0.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// RFC 3339 in UTC to the microsecond: `2026-12-05T04:52:19.931608Z`.
struct Timestamp(SystemTime);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whole seconds since the epoch (floored) and the nanoseconds past them.
        let (secs, nanos) = match self.0.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => (
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                d.subsec_nanos(),
            ),
            Err(e) => {
                let d = e.duration();
                let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                match d.subsec_nanos() {
                    0 => (-secs, 0),
                    n => (-secs - 1, 1_000_000_000 - n),
                }
            }
        };
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        let s = secs.rem_euclid(86_400);
        if year > 9999 {
            write!(f, "+{year}")?;
        } else if year < 0 {
            write!(f, "{year:05}")?;
        } else {
            write!(f, "{year:04}")?;
        }
        write!(
            f,
            "-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
            s / 3600,
            s / 60 % 60,
            s % 60,
            nanos / 1_000
        )
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`):
/// counted in 400-year eras from 0000-03-01, so that the leap day ends each year.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // In range by construction: month 1..=12, day 1..=31.
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// A writer whose bytes the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[derive(Debug)]
    struct Outer(io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot read \x1b[1mit")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Every kind of event and field: what the code base logs (a formatted message) and more.
    fn emit() {
        let path = std::path::Path::new("/etc/cdi/nvidia.yaml");
        let leaf = io::Error::new(io::ErrorKind::NotFound, "no such file");
        let outer = Outer(io::Error::other("gone"));
        tracing::trace!("too verbose: {}", 1);
        tracing::debug!("{}: CDI spec cache used", path.display());
        tracing::info!("injected {} mounts, {} device nodes", 3, 8);
        tracing::warn!("{}: unknown key {} ignored", path.display(), "foo");
        tracing::error!("bad\x1b[31m red \x07\x08\x0c\x7f \u{85}\u{9b} ok\nsecond \"line\" é");
        tracing::info!(
            key = "str value",
            n = 3,
            neg = -4,
            flag = true,
            x = 1.5,
            "with fields"
        );
        tracing::warn!(path = ?path, shown = %path.display(), "debug and display");
        tracing::info!(r#type = "raw", "raw identifier");
        tracing::info!(message = "a message as a str \x1b");
        tracing::info!(a = 1, b = "two");
        tracing::warn!(
            err = &leaf as &(dyn std::error::Error + 'static),
            "leaf error"
        );
        tracing::warn!(
            err = &outer as &(dyn std::error::Error + 'static),
            "chained error"
        );
        tracing::error!("{}", "");
    }

    fn ours(max: Level, clock: Option<fn() -> SystemTime>, ansi: bool) -> String {
        let out = Captured::default();
        let logger = Logger::new(
            out.clone(),
            max,
            clock,
            if ansi { || true } else { || false },
        );
        tracing::subscriber::with_default(logger, emit);
        out.text()
    }

    /// 2026-12-05T04:52:19.931608Z, and some nanoseconds that are cut off.
    fn fixed() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::new(1_796_446_339, 931_608_999)
    }

    #[test]
    fn lines_as_tracing_subscriber_wrote_them() {
        assert_eq!(
            ours(Level::DEBUG, Some(fixed), false),
            "2026-12-05T04:52:19.931608Z DEBUG /etc/cdi/nvidia.yaml: CDI spec cache used\n\
             2026-12-05T04:52:19.931608Z  INFO injected 3 mounts, 8 device nodes\n\
             2026-12-05T04:52:19.931608Z  WARN /etc/cdi/nvidia.yaml: unknown key foo ignored\n\
             2026-12-05T04:52:19.931608Z ERROR bad\\x1b[31m red \\x07\\x08\\x0c\\x7f \\u{85}\\u{9b} ok\nsecond \"line\" é\n\
             2026-12-05T04:52:19.931608Z  INFO with fields key=\"str value\" n=3 neg=-4 flag=true x=1.5\n\
             2026-12-05T04:52:19.931608Z  WARN debug and display path=\"/etc/cdi/nvidia.yaml\" shown=/etc/cdi/nvidia.yaml\n\
             2026-12-05T04:52:19.931608Z  INFO raw identifier type=\"raw\"\n\
             2026-12-05T04:52:19.931608Z  INFO a message as a str \\x1b\n\
             2026-12-05T04:52:19.931608Z  INFO a=1 b=\"two\"\n\
             2026-12-05T04:52:19.931608Z  WARN leaf error err=no such file\n\
             2026-12-05T04:52:19.931608Z  WARN chained error err=cannot read \\x1b[1mit err.sources=[gone]\n\
             2026-12-05T04:52:19.931608Z ERROR \n"
        );
        assert_eq!(
            ours(Level::WARN, None, false),
            " WARN /etc/cdi/nvidia.yaml: unknown key foo ignored\n\
             ERROR bad\\x1b[31m red \\x07\\x08\\x0c\\x7f \\u{85}\\u{9b} ok\nsecond \"line\" é\n \
             WARN debug and display path=\"/etc/cdi/nvidia.yaml\" shown=/etc/cdi/nvidia.yaml\n \
             WARN leaf error err=no such file\n \
             WARN chained error err=cannot read \\x1b[1mit err.sources=[gone]\n\
             ERROR \n"
        );
        assert_eq!(
            ours(Level::TRACE, None, true),
            "\x1b[35mTRACE\x1b[0m too verbose: 1\n\
             \x1b[34mDEBUG\x1b[0m /etc/cdi/nvidia.yaml: CDI spec cache used\n\
             \x1b[32m INFO\x1b[0m injected 3 mounts, 8 device nodes\n\
             \x1b[33m WARN\x1b[0m /etc/cdi/nvidia.yaml: unknown key foo ignored\n\
             \x1b[31mERROR\x1b[0m bad\\x1b[31m red \\x07\\x08\\x0c\\x7f \\u{85}\\u{9b} ok\nsecond \"line\" é\n\
             \x1b[32m INFO\x1b[0m with fields \x1b[3mkey\x1b[0m\x1b[2m=\x1b[0m\"str value\" \x1b[3mn\x1b[0m\x1b[2m=\x1b[0m3 \x1b[3mneg\x1b[0m\x1b[2m=\x1b[0m-4 \x1b[3mflag\x1b[0m\x1b[2m=\x1b[0mtrue \x1b[3mx\x1b[0m\x1b[2m=\x1b[0m1.5\n\
             \x1b[33m WARN\x1b[0m debug and display \x1b[3mpath\x1b[0m\x1b[2m=\x1b[0m\"/etc/cdi/nvidia.yaml\" \x1b[3mshown\x1b[0m\x1b[2m=\x1b[0m/etc/cdi/nvidia.yaml\n\
             \x1b[32m INFO\x1b[0m raw identifier \x1b[3mtype\x1b[0m\x1b[2m=\x1b[0m\"raw\"\n\
             \x1b[32m INFO\x1b[0m a message as a str \\x1b\n\
             \x1b[32m INFO\x1b[0m \x1b[3ma\x1b[0m\x1b[2m=\x1b[0m1 \x1b[3mb\x1b[0m\x1b[2m=\x1b[0m\"two\"\n\
             \x1b[33m WARN\x1b[0m leaf error \x1b[3merr\x1b[0m\x1b[2m=\x1b[0mno such file\n\
             \x1b[33m WARN\x1b[0m chained error \x1b[3merr\x1b[0m\x1b[2m=\x1b[0mcannot read \\x1b[1mit \x1b[3merr\x1b[0m\x1b[3m.sources\x1b[0m\x1b[2m=\x1b[0m[gone]\n\
             \x1b[31mERROR\x1b[0m \n"
        );
    }

    fn at(secs: i64, nanos: u32) -> String {
        let t = if secs >= 0 {
            SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nanos)
        } else {
            SystemTime::UNIX_EPOCH - Duration::new(secs.unsigned_abs(), 0) + Duration::new(0, nanos)
        };
        Timestamp(t).to_string()
    }

    #[test]
    fn timestamps() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(86_399, 999_999_999), "1970-01-01T23:59:59.999999Z");
        assert_eq!(at(68_169_600, 0), "1972-02-29T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 1_000), "2000-02-29T00:00:00.000001Z");
        assert_eq!(at(951_868_799, 0), "2000-02-29T23:59:59.000000Z");
        assert_eq!(at(951_868_800, 0), "2000-03-01T00:00:00.000000Z");
        assert_eq!(at(4_107_542_399, 0), "2100-02-28T23:59:59.000000Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000000Z"); // 2100: no Feb 29
        assert_eq!(
            at(1_796_446_339, 931_608_999),
            "2026-12-05T04:52:19.931608Z"
        );
        assert_eq!(
            at(1_798_761_599, 999_999_000),
            "2026-12-31T23:59:59.999999Z"
        );
        assert_eq!(at(1_798_761_600, 0), "2027-01-01T00:00:00.000000Z");
        assert_eq!(at(1_709_164_800, 0), "2024-02-29T00:00:00.000000Z");
        assert_eq!(at(-1, 0), "1969-12-31T23:59:59.000000Z");
        assert_eq!(at(-1, 500_000_000), "1969-12-31T23:59:59.500000Z");
        assert_eq!(at(253_402_300_799, 0), "9999-12-31T23:59:59.000000Z");
        assert_eq!(at(253_402_300_800, 0), "+10000-01-01T00:00:00.000000Z");
    }

    /// Every day from 1600 to 2500 against counting days one by one.
    #[test]
    fn civil_from_days_counts_days() {
        let leap = |y: i64| y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        let month_days = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        // 1600-01-01 is 135,140 days before 1970-01-01.
        let (mut y, mut m, mut d) = (1600, 1, 1);
        for days in -135_140..194_000 {
            assert_eq!(civil_from_days(days), (y, m, d), "{days}");
            d += 1;
            if d > month_days(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
        assert_eq!(y, 2501);
    }
}
