//! The report: one table of every figure beside socat's, with the ratio and
//! the target it is held to, and the release binary's size.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::plan::{Figures, ModeFigures, KIB, MIB};
use crate::session::bridge;

fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    Some(v[i])
}

fn max(values: &[f64]) -> Option<f64> {
    values
        .iter()
        .copied()
        .fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

/// How a target is expressed.
enum Target {
    None,
    /// Ratio to socat at most this.
    RatioAtMost(f64),
    /// Ratio to socat at least this.
    RatioAtLeast(f64),
    /// Absolute value at most this (in the row's unit).
    AtMost(f64),
}

struct Row {
    name: &'static str,
    unit: &'static str,
    scale: f64,
    target: Target,
    get: fn(&Figures) -> Option<f64>,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "round trip p50, 200 B line",
            unit: "us",
            scale: 1e6,
            target: Target::RatioAtMost(1.0),
            get: |f| percentile(&f.latency, 0.5),
        },
        Row {
            name: "round trip p99, 200 B line",
            unit: "us",
            scale: 1e6,
            target: Target::None,
            get: |f| percentile(&f.latency, 0.99),
        },
        Row {
            name: "throughput, 64 KiB lines",
            unit: "MiB/s",
            scale: 1.0,
            target: Target::RatioAtLeast(2.0),
            get: |f| percentile(&f.rate[0], 0.5),
        },
        Row {
            name: "throughput, 1 MiB lines",
            unit: "MiB/s",
            scale: 1.0,
            target: Target::None,
            get: |f| percentile(&f.rate[1], 0.5),
        },
        Row {
            name: "throughput, one huge line",
            unit: "MiB/s",
            scale: 1.0,
            target: Target::None,
            get: |f| percentile(&f.rate[2], 0.5),
        },
        Row {
            name: "CPU per GiB, 64 KiB lines",
            unit: "s",
            scale: 1.0,
            target: Target::RatioAtMost(0.6),
            get: |f| percentile(&f.cpu[0], 0.5),
        },
        Row {
            name: "CPU per GiB, 1 MiB lines",
            unit: "s",
            scale: 1.0,
            target: Target::RatioAtMost(0.6),
            get: |f| percentile(&f.cpu[1], 0.5),
        },
        Row {
            name: "CPU per GiB, one huge line",
            unit: "s",
            scale: 1.0,
            target: Target::RatioAtMost(0.6),
            get: |f| percentile(&f.cpu[2], 0.5),
        },
        Row {
            name: "spawn to first reply p50",
            unit: "ms",
            scale: 1e3,
            target: Target::RatioAtMost(0.6),
            get: |f| percentile(&f.spawn, 0.5),
        },
        Row {
            name: "stdin EOF to exit p50",
            unit: "ms",
            scale: 1e3,
            target: Target::AtMost(5.0),
            get: |f| percentile(&f.eof_exit, 0.5),
        },
        Row {
            name: "stdin EOF to exit max",
            unit: "ms",
            scale: 1e3,
            target: Target::None,
            get: |f| max(&f.eof_exit),
        },
        Row {
            name: "host hang-up to exit p50",
            unit: "ms",
            scale: 1e3,
            target: Target::AtMost(50.0),
            get: |f| percentile(&f.hangup_exit, 0.5),
        },
        Row {
            name: "peak RSS, one huge line",
            unit: "MiB",
            scale: 1.0 / MIB as f64,
            target: Target::AtMost(3.0),
            get: |f| max(&f.rss_huge),
        },
        Row {
            name: "peak RSS, idle session",
            unit: "MiB",
            scale: 1.0 / MIB as f64,
            target: Target::None,
            get: |f| max(&f.rss_idle),
        },
    ]
}

fn verdict(target: &Target, value: f64, ratio: Option<f64>) -> &'static str {
    let ok = match *target {
        Target::None => return "",
        Target::RatioAtMost(r) => ratio.map(|x| x <= r),
        Target::RatioAtLeast(r) => ratio.map(|x| x >= r),
        Target::AtMost(v) => Some(value <= v),
    };
    match ok {
        Some(true) => "ok",
        Some(false) => "MISSED",
        None => "?",
    }
}

fn target_text(target: &Target, unit: &str) -> String {
    match *target {
        Target::None => String::new(),
        Target::RatioAtMost(r) => format!("<= {:.1}x", r),
        Target::RatioAtLeast(r) => format!(">= {:.1}x", r),
        Target::AtMost(v) => format!("<= {} {}", v, unit),
    }
}

/// The table: every figure of the bridge beside socat's, with the ratio
/// and the target, then the floor's where it was measured (throughput,
/// CPU, memory) and the bridge's ratio to it.
pub fn table(results: &[ModeFigures]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<28} {:<6} {:>11} {:>11} {:>7}  {:<10} {:<6} {:>9} {:>7}",
        "", "unit", "mcp-bridge", "socat", "ratio", "target", "", "floor", "/floor"
    );
    for (mode, bridge, socat, floor) in results {
        let _ = writeln!(t, "-- stdio as {}", mode.name());
        for row in rows() {
            let b = (row.get)(bridge).map(|v| v * row.scale);
            let s = socat
                .as_ref()
                .and_then(|f| (row.get)(f))
                .map(|v| v * row.scale);
            let fl = (row.get)(floor).map(|v| v * row.scale);
            let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
                (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                _ => None,
            };
            let fmt = |v: Option<f64>| match v {
                Some(v) if v >= 100.0 => format!("{:.0}", v),
                Some(v) if v >= 10.0 => format!("{:.1}", v),
                Some(v) => format!("{:.3}", v),
                None => "-".into(),
            };
            let times = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.2}x", r));
            let line = format!(
                "{:<28} {:<6} {:>11} {:>11} {:>7}  {:<10} {:<6} {:>9} {:>7}",
                row.name,
                row.unit,
                fmt(b),
                fmt(s),
                times(ratio(b, s)),
                target_text(&row.target, row.unit),
                b.map_or("?", |b| verdict(&row.target, b, ratio(Some(b), s))),
                fmt(fl),
                times(ratio(b, fl)),
            );
            let _ = writeln!(t, "{}", line.trim_end());
        }
    }
    t
}

/// The release binary's size, stripped (a copy is stripped if `strip` is
/// installed; the profile already strips).
pub fn binary_size() -> String {
    let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let copy = std::env::temp_dir().join(format!("mcp-bridge-bench-bin-{}", std::process::id()));
    let stripped = fs::copy(bridge(), &copy).is_ok()
        && Command::new("strip")
            .arg(&copy)
            .stderr(Stdio::null())
            .status()
            .map_or(false, |s| s.success());
    let bytes = if stripped {
        size(&copy)
    } else {
        size(&bridge())
    };
    let _ = fs::remove_file(&copy);
    let socat = Command::new("sh")
        .args([
            "-c",
            "p=$(command -v socat) && stat -L -c %s \"$p\" && ldd \"$p\" | grep -c '=>'",
        ])
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let socat = match socat.as_slice() {
        [bytes, libs] => format!(
            "; socat: {} KiB + {} shared libraries",
            bytes.parse::<u64>().unwrap_or(0) / KIB,
            libs
        ),
        _ => String::new(),
    };
    format!(
        "stripped release binary: {} bytes ({} KiB), target <= 409600 bytes: {}{}",
        bytes,
        bytes / KIB,
        if bytes <= 409_600 { "ok" } else { "MISSED" },
        socat
    )
}
