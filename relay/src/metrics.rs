//! All of the relay's metrics, in one place (house rule 11): counters with labels from closed
//! enums (so cardinality is bounded by construction), rendered in Prometheus text format.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

/// A set of counters keyed by (metric name, instance, label value).
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(&'static str, String, &'static str), u64>>,
    active_perceptron: AtomicI64,
}

/// Counters the relay keeps.
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    /// `relay_connections_total{instance, outcome}`: connections on the perceptron route by
    /// how they ended.
    Connections,
    /// `relay_classifications_total{instance, class}`: connections that were not logins.
    Classifications,
    /// `relay_wakes_total{instance, outcome}`: wake attempts (one per spawn, however many
    /// clients waited on it).
    Wakes,
    /// `relay_bytes_total{instance, direction}`: bytes copied after relayed logins.
    Bytes,
}

impl Counter {
    const fn name(self) -> &'static str {
        match self {
            Self::Connections => "relay_connections_total",
            Self::Classifications => "relay_classifications_total",
            Self::Wakes => "relay_wakes_total",
            Self::Bytes => "relay_bytes_total",
        }
    }

    const fn label(self) -> &'static str {
        match self {
            Self::Connections | Self::Wakes => "outcome",
            Self::Classifications => "class",
            Self::Bytes => "direction",
        }
    }
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(&self, counter: Counter, instance: &str, value: &'static str, n: u64) {
        if let Ok(mut m) = self.counters.lock() {
            *m.entry((counter.name(), instance.to_owned(), value))
                .or_default() += n;
        }
    }

    /// Adds one to a counter.
    pub fn inc(&self, counter: Counter, instance: &str, value: &'static str) {
        self.add(counter, instance, value, 1);
    }

    /// A counter's current value.
    #[must_use]
    pub fn get(&self, counter: Counter, instance: &str, value: &'static str) -> u64 {
        self.counters
            .lock()
            .ok()
            .and_then(|m| {
                m.get(&(counter.name(), instance.to_owned(), value))
                    .copied()
            })
            .unwrap_or(0)
    }

    /// Counts a perceptron-held connection for as long as the guard lives, on every exit path.
    #[must_use]
    pub fn active_perceptron_guard(&self) -> ActiveGuard<'_> {
        self.active_perceptron.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(&self.active_perceptron)
    }

    /// Perceptron-held connections open now.
    #[must_use]
    pub fn active_perceptron(&self) -> i64 {
        self.active_perceptron.load(Ordering::Relaxed)
    }

    /// Prometheus text exposition.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut last = "";
        if let Ok(m) = self.counters.lock() {
            for ((name, instance, value), n) in m.iter() {
                if *name != last {
                    out.push_str(&format!("# TYPE {name} counter\n"));
                    last = name;
                }
                let label = [
                    Counter::Connections,
                    Counter::Classifications,
                    Counter::Wakes,
                    Counter::Bytes,
                ]
                .into_iter()
                .find(|c| c.name() == *name)
                .map_or("value", Counter::label);
                out.push_str(&format!(
                    "{name}{{instance=\"{instance}\",{label}=\"{value}\"}} {n}\n"
                ));
            }
        }
        out.push_str(&format!(
            "# TYPE relay_active_connections gauge\nrelay_active_connections{{route=\"perceptron\"}} {}\n",
            self.active_perceptron()
        ));
        out
    }
}

/// Decrements the active-connection gauge when dropped.
#[derive(Debug)]
pub struct ActiveGuard<'a>(&'a AtomicI64);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauge() {
        let m = Metrics::default();
        m.inc(Counter::Wakes, "demo", "ok");
        m.inc(Counter::Wakes, "demo", "ok");
        {
            let _g = m.active_perceptron_guard();
            assert_eq!(m.active_perceptron(), 1);
        }
        let text = m.render();
        assert!(
            text.contains("relay_wakes_total{instance=\"demo\",outcome=\"ok\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("relay_active_connections{route=\"perceptron\"} 0"),
            "{text}"
        );
    }
}
