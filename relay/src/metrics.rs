//! All of the relay's metrics, in one place (house rule 11): counters with labels from closed
//! enums (so cardinality is bounded by construction), rendered in Prometheus text format.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::lifecycle::Phase;

/// A set of counters keyed by (counter, instance, label value).
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(Counter, String, &'static str), u64>>,
    /// Per instance: counts per bucket of [`RESUME_BUCKETS_S`], then the sum in seconds.
    resume: Mutex<BTreeMap<String, Histogram>>,
    phases: Mutex<BTreeMap<String, Phase>>,
}

/// Upper bounds (seconds) of the resume-time histogram buckets: our target is tens of
/// milliseconds, the reference system's is about 2 s.
pub const RESUME_BUCKETS_S: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0,
];

/// Bucket counts, total count and sum in seconds.
type Histogram = ([u64; RESUME_BUCKETS_S.len()], u64, f64);

/// Counters the relay keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Counter {
    /// `relay_connections_total{instance, outcome}`: connections on the perceptron route by
    /// how they ended (`relayed`, `denied`, or the failure's label).
    Connections,
    /// `relay_classifications_total{instance, class}`: connections that were not logins.
    Classifications,
    /// `relay_wakes_total{instance, outcome}`: wake attempts (one per spawn, however many
    /// clients waited on it).
    Wakes,
    /// `relay_bytes_total{instance, direction}`: bytes copied on either route.
    Bytes,
    /// `relay_direct_connections_total{instance, outcome}`: connections on the direct route.
    Direct,
}

impl Counter {
    const fn name(self) -> &'static str {
        match self {
            Self::Connections => "relay_connections_total",
            Self::Classifications => "relay_classifications_total",
            Self::Wakes => "relay_wakes_total",
            Self::Bytes => "relay_bytes_total",
            Self::Direct => "relay_direct_connections_total",
        }
    }

    const fn label(self) -> &'static str {
        match self {
            Self::Connections | Self::Wakes | Self::Direct => "outcome",
            Self::Classifications => "class",
            Self::Bytes => "direction",
        }
    }
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(&self, counter: Counter, instance: &str, value: &'static str, n: u64) {
        if let Ok(mut m) = self.counters.lock() {
            *m.entry((counter, instance.to_owned(), value)).or_default() += n;
        }
    }

    /// Counts the bytes a byte pump copied for `instance`, per direction.
    pub fn add_pumped(&self, instance: &str, client_to_compute: u64, compute_to_client: u64) {
        self.add(
            Counter::Bytes,
            instance,
            "client_to_compute",
            client_to_compute,
        );
        self.add(
            Counter::Bytes,
            instance,
            "compute_to_client",
            compute_to_client,
        );
    }

    /// Adds one to a counter.
    pub fn inc(&self, counter: Counter, instance: &str, value: &'static str) {
        self.add(counter, instance, value, 1);
    }

    /// Records how long a successful wake took.
    pub fn observe_resume(&self, instance: &str, took: std::time::Duration) {
        let secs = took.as_secs_f64();
        if let Ok(mut m) = self.resume.lock() {
            let (buckets, count, sum) = m.entry(instance.to_owned()).or_default();
            for (bucket, le) in buckets.iter_mut().zip(RESUME_BUCKETS_S) {
                if secs <= le {
                    *bucket += 1;
                }
            }
            *count += 1;
            *sum += secs;
        }
    }

    /// Records the phase an instance entered.
    pub fn set_phase(&self, instance: &str, phase: Phase) {
        if let Ok(mut m) = self.phases.lock() {
            m.insert(instance.to_owned(), phase);
        }
    }

    /// Prometheus text exposition.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut last = None;
        if let Ok(m) = self.counters.lock() {
            for ((counter, instance, value), n) in m.iter() {
                let name = counter.name();
                if last != Some(*counter) {
                    out.push_str(&format!("# TYPE {name} counter\n"));
                    last = Some(*counter);
                }
                let label = counter.label();
                out.push_str(&format!(
                    "{name}{{instance=\"{instance}\",{label}=\"{value}\"}} {n}\n"
                ));
            }
        }
        if let Ok(m) = self.resume.lock() {
            out.push_str("# TYPE relay_resume_seconds histogram\n");
            for (instance, (buckets, count, sum)) in m.iter() {
                for (n, le) in buckets.iter().zip(RESUME_BUCKETS_S) {
                    out.push_str(&format!(
                        "relay_resume_seconds_bucket{{instance=\"{instance}\",le=\"{le}\"}} {n}\n"
                    ));
                }
                out.push_str(&format!(
                    "relay_resume_seconds_bucket{{instance=\"{instance}\",le=\"+Inf\"}} {count}\n\
                     relay_resume_seconds_sum{{instance=\"{instance}\"}} {sum}\n\
                     relay_resume_seconds_count{{instance=\"{instance}\"}} {count}\n"
                ));
            }
        }
        if let Ok(m) = self.phases.lock() {
            out.push_str("# TYPE relay_instance_state gauge\n");
            for (instance, current) in m.iter() {
                for phase in Phase::ALL {
                    let v = u8::from(*current == phase);
                    let phase = phase.as_str();
                    out.push_str(&format!(
                        "relay_instance_state{{instance=\"{instance}\",state=\"{phase}\"}} {v}\n"
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histogram_and_state() {
        let m = Metrics::default();
        m.inc(Counter::Wakes, "demo", "ok");
        m.inc(Counter::Wakes, "demo", "ok");
        m.observe_resume("demo", std::time::Duration::from_millis(30));
        m.set_phase("demo", Phase::Running);
        let text = m.render();
        for line in [
            "relay_wakes_total{instance=\"demo\",outcome=\"ok\"} 2",
            "relay_resume_seconds_bucket{instance=\"demo\",le=\"0.025\"} 0",
            "relay_resume_seconds_bucket{instance=\"demo\",le=\"0.05\"} 1",
            "relay_resume_seconds_count{instance=\"demo\"} 1",
            "relay_instance_state{instance=\"demo\",state=\"running\"} 1",
            "relay_instance_state{instance=\"demo\",state=\"paused\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in:\n{text}");
        }
    }
}
