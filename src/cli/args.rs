//! A lexopt-shaped scanner of arguments: it tells options (`-x`, `--name`,
//! `--name=value`) from words, hands out an option's value on request
//! (inline after `=`, or the next argument, even one starting with a dash),
//! and turns the usual mistakes into one-line [`UsageError`]s. It knows no
//! option names: `mod.rs` has one arm per option.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use mcp_bridge::endpoint::ServerUser;

#[cfg(feature = "serve")]
use super::MAX_MAX_CONNECTIONS;
use super::{UsageError, MAX_SECONDS};

/// One step through the arguments.
pub(super) enum Arg {
    /// `-x`, `--name`, or the name of `--name=value` (whose value is kept
    /// for [`Parser::value`]).
    Option(String),
    /// Anything else: a subcommand, a positional argument, `-` or `--`.
    Word(OsString),
}

impl Arg {
    /// The error for an argument `command` does not take.
    pub(super) fn unexpected(self, command: &str) -> UsageError {
        UsageError(match self {
            Arg::Option(name) => format!("unknown option '{}'", name),
            Arg::Word(word) => format!(
                "unexpected argument '{}' for '{}'",
                word.to_string_lossy(),
                command
            ),
        })
    }
}

pub(super) struct Parser<I> {
    args: I,
    /// The value of a `--name=value` just returned, until taken.
    inline: Option<OsString>,
}

impl<I: Iterator<Item = OsString>> Parser<I> {
    /// A scanner over `args` (the program name already taken off).
    pub(super) fn new(args: I) -> Parser<I> {
        Parser { args, inline: None }
    }

    pub(super) fn next(&mut self) -> Result<Option<Arg>, UsageError> {
        // A `--name=value` whose option took no value.
        self.no_value()?;
        let arg = match self.args.next() {
            Some(arg) => arg,
            None => return Ok(None),
        };
        let (name, inline) = split_at_equals(&arg);
        let name = match name.to_str() {
            Some(name) if name.starts_with('-') && name != "-" && name != "--" => name.to_owned(),
            _ => return Ok(Some(Arg::Word(arg))),
        };
        self.inline = inline;
        Ok(Some(Arg::Option(name)))
    }

    /// Refuses a value given inline to an option that takes none
    /// (`--help=yes`), which would otherwise be silently ignored.
    pub(super) fn no_value(&mut self) -> Result<(), UsageError> {
        match self.inline.take() {
            None => Ok(()),
            Some(value) => Err(UsageError(format!(
                "unexpected value '{}'",
                value.to_string_lossy()
            ))),
        }
    }

    /// The value of option `name`: inline after `=`, or the next argument
    /// (which may start with a dash).
    pub(super) fn value(&mut self, name: &str) -> Result<OsString, UsageError> {
        match self.inline.take().or_else(|| self.args.next()) {
            Some(value) => Ok(value),
            None => Err(UsageError(format!("option '{}' needs a value", name))),
        }
    }

    /// A file path, which must not be empty (any OS path otherwise).
    pub(super) fn path(&mut self, name: &str) -> Result<PathBuf, UsageError> {
        let value = self.value(name)?;
        if value.is_empty() {
            return Err(UsageError(format!("option '{}' must not be empty", name)));
        }
        Ok(PathBuf::from(value))
    }

    pub(super) fn utf8(&mut self, name: &str) -> Result<String, UsageError> {
        self.value(name)?
            .into_string()
            .map_err(|_| UsageError(format!("the value of '{}' must be valid UTF-8", name)))
    }

    /// A number of seconds, more than 0 and at most [`MAX_SECONDS`].
    pub(super) fn seconds(&mut self, name: &str) -> Result<Duration, UsageError> {
        let text = self.value(name)?.to_string_lossy().into_owned();
        // A sign is read so that `-1` is out of range rather than not a number.
        let trimmed = text.trim();
        let (negative, unsigned) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
        };
        let seconds = match decimal_seconds(unsigned) {
            Some(_) if negative => Duration::ZERO,
            Some(seconds) => seconds,
            None => {
                return Err(UsageError(format!(
                    "'{}' expects a number of seconds, got '{}'",
                    name, text
                )))
            }
        };
        if seconds.is_zero() || seconds > Duration::from_secs(MAX_SECONDS) {
            return Err(UsageError(format!(
                "'{}' must be more than 0 and at most {} seconds, got '{}'",
                name, MAX_SECONDS, text
            )));
        }
        Ok(seconds)
    }

    /// A uid (Unix) or SID (Windows).
    pub(super) fn server_user(&mut self, name: &str) -> Result<ServerUser, UsageError> {
        let value = self.utf8(name)?;
        value
            .parse()
            .map_err(|e| UsageError(format!("'{}': {}", name, e)))
    }

    /// A whole number from 1 to [`MAX_MAX_CONNECTIONS`].
    #[cfg(feature = "serve")]
    pub(super) fn count(&mut self, name: &str) -> Result<usize, UsageError> {
        let text = self.value(name)?.to_string_lossy().into_owned();
        match text.parse::<usize>() {
            Ok(n) if (1..=MAX_MAX_CONNECTIONS).contains(&n) => Ok(n),
            _ => Err(UsageError(format!(
                "'{}' expects a whole number from 1 to {}, got '{}'",
                name, MAX_MAX_CONNECTIONS, text
            ))),
        }
    }

    /// Everything not parsed yet, verbatim.
    #[cfg(feature = "serve")]
    pub(super) fn rest(&mut self) -> impl Iterator<Item = OsString> + '_ {
        &mut self.args
    }
}

/// A decimal number of seconds (`30`, `2.5`, `.25`, `1e3` not), read in
/// whole numbers rather than through `f64`: the same durations for every
/// value a person types, and no float parsing and formatting code (tens of
/// kilobytes) in the bridge-only build. Digits past the nanosecond are
/// dropped; `None` for anything else, or more seconds than a `u64` holds.
pub(super) fn decimal_seconds(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digit = |b: &u8| (*b as char).to_digit(10);
    if (whole.is_empty() && fraction.is_empty()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut secs: u64 = 0;
    for b in whole.as_bytes() {
        secs = secs.checked_mul(10)?.checked_add(u64::from(digit(b)?))?;
    }
    let mut nanos = 0;
    for i in 0..9 {
        nanos = nanos * 10 + fraction.as_bytes().get(i).map_or(Some(0), digit)?;
    }
    Some(Duration::new(secs, nanos))
}

/// Stores an option's value, refusing a second one.
pub(super) fn once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), UsageError> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(UsageError(format!(
            "option '{}' given more than once",
            name
        ))),
    }
}

/// The endpoint: `--endpoint` as given, or the one `--app` names for this
/// user and OS; exactly one of the two.
pub(super) fn endpoint_or_app(
    endpoint: Option<OsString>,
    app: Option<&str>,
) -> Result<PathBuf, UsageError> {
    match (endpoint, app) {
        (Some(_), Some(_)) => Err(UsageError(
            "options '--endpoint' and '--app' cannot be used together".into(),
        )),
        (None, Some(app)) => {
            mcp_bridge::endpoint::for_app(app).map_err(|e| UsageError(format!("'--app': {}", e)))
        }
        (Some(endpoint), None) if !endpoint.is_empty() => Ok(PathBuf::from(endpoint)),
        (Some(_), None) => Err(UsageError("option '--endpoint' must not be empty".into())),
        (None, None) => Err(UsageError(
            "missing required option '--endpoint <PATH>' (or '--app <NAME>')".into(),
        )),
    }
}

/// Splits `--name=value` at the first `=`. Done on the platform's raw
/// representation (`OsStr` has no `split_once`), so a non-UTF-8 value such
/// as an endpoint path stays intact; the name before it is ASCII.
#[cfg(unix)]
fn split_at_equals(arg: &OsStr) -> (OsString, Option<OsString>) {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    split_units(arg.as_bytes(), b'=', |units| {
        OsString::from_vec(units.to_vec())
    })
}

#[cfg(windows)]
fn split_at_equals(arg: &OsStr) -> (OsString, Option<OsString>) {
    use std::os::windows::ffi::{OsStrExt, OsStringExt};
    let wide: Vec<u16> = arg.encode_wide().collect();
    split_units(&wide, u16::from(b'='), OsString::from_wide)
}

/// `units` split at the first `equals`, each side made a string by `make`.
fn split_units<T: PartialEq>(
    units: &[T],
    equals: T,
    make: impl Fn(&[T]) -> OsString,
) -> (OsString, Option<OsString>) {
    let mut sides = units.splitn(2, |unit| *unit == equals);
    let name = make(sides.next().unwrap_or_default());
    (name, sides.next().map(make))
}
