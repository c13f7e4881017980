//! Decimal numbers with a fixed number of places (`12.3 ms`, `1.5 KiB`),
//! printed from integers.
//!
//! Why not `format!("{:.1}", x as f64)`: core's float formatting (Grisu
//! with its Dragon fallback and their tables) is 13 KB of the binary, and
//! the figures printed here are integers to begin with (nanoseconds,
//! bytes). Rounding is half to even, as the float formatting rounds a tie
//! it can represent (a decimal tie such as 0.005 is not one in binary).
//!
//! Compiled into the library (doctor, the traffic log) and, through
//! `#[path]`, into the binary (the demo), which cannot see the library's
//! private items.

use std::fmt;
use std::time::Duration;

/// `value / divisor` with `places` decimals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fixed {
    /// The number times `10^places`, rounded.
    units: u64,
    places: u32,
}

impl Fixed {
    /// `value / divisor`, rounded (half to even) to `places` decimals.
    pub(crate) fn ratio(value: u64, divisor: u64, places: u32) -> Fixed {
        let scaled = value.saturating_mul(10u64.pow(places));
        let (units, rest) = (scaled / divisor, scaled % divisor);
        let up = match rest.saturating_mul(2).cmp(&divisor) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => units % 2 == 1,
            std::cmp::Ordering::Less => false,
        };
        Fixed {
            units: units + u64::from(up),
            places,
        }
    }

    /// `d` in milliseconds, to `places` decimals.
    pub(crate) fn millis(d: Duration, places: u32) -> Fixed {
        Fixed::ratio(nanos(d), 1_000_000, places)
    }
}

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.places == 0 {
            return write!(f, "{}", self.units);
        }
        let one = 10u64.pow(self.places);
        write!(
            f,
            "{}.{:0width$}",
            self.units / one,
            self.units % one,
            width = self.places as usize
        )
    }
}

/// `d` in seconds, as short as it is exact: `5`, `1.5`, `0.025`.
#[allow(dead_code)] // not every build that has this file prints seconds
pub(crate) fn seconds(d: Duration) -> String {
    let mut text = d.as_secs().to_string();
    let fraction = d.subsec_nanos();
    if fraction > 0 {
        let digits = format!("{:09}", fraction);
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text
}

fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_what_the_float_formatting_printed() {
        for (value, divisor, places) in [
            (1536u64, 1024u64, 1u32),
            (1280, 1024, 1),
            (1331, 1024, 1),
            (15 * 1024 * 1024 + 1, 1024 * 1024, 1),
            (999, 1000, 2),
            (1234, 1000, 2),
            (125, 100, 1),
            (135, 100, 1),
            (7, 1, 0),
        ] {
            let float = format!("{:.*}", places as usize, value as f64 / divisor as f64);
            assert_eq!(Fixed::ratio(value, divisor, places).to_string(), float);
        }
        assert_eq!(
            Fixed::millis(Duration::from_micros(12_345), 1).to_string(),
            "12.3"
        );
        assert_eq!(
            Fixed::millis(Duration::from_micros(1_250), 2).to_string(),
            "1.25"
        );
    }

    #[test]
    fn seconds_are_as_short_as_they_are_exact() {
        for (d, text) in [
            (Duration::from_secs(5), "5"),
            (Duration::from_millis(1500), "1.5"),
            (Duration::from_millis(25), "0.025"),
            (Duration::from_nanos(1_000_000_001), "1.000000001"),
        ] {
            assert_eq!(seconds(d), text);
            assert_eq!(seconds(d), d.as_secs_f64().to_string());
        }
    }
}
