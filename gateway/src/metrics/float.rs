//! Counters of fractional quantities (dollars, device-seconds). The recorder's counters
//! hold whole numbers, so these live here and are rendered at each scrape as
//! `# TYPE … counter`, beside the recorder's text.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A float that only grows: [`FloatCounter::add`] a part, or [`FloatCounter::advance_to`]
/// a running total kept elsewhere.
#[derive(Debug, Default)]
pub struct FloatCounter(AtomicU64);

impl FloatCounter {
    pub fn add(&self, by: f64) {
        if by.is_nan() || by <= 0.0 {
            return;
        }
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + by).to_bits())
            });
    }

    /// Sets the counter to `total`, unless that would make it go down.
    pub fn advance_to(&self, total: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                (total > f64::from_bits(bits)).then_some(total.to_bits())
            });
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// Every float counter, by name and then by its labels as the exposition format writes
/// them (`{kind="inference"}`, or empty).
type Families = BTreeMap<&'static str, BTreeMap<String, Arc<FloatCounter>>>;

fn families() -> &'static Mutex<Families> {
    static FAMILIES: OnceLock<Mutex<Families>> = OnceLock::new();
    FAMILIES.get_or_init(Mutex::default)
}

/// The counter `name` with these labels, made at 0 on first use: it is in every scrape
/// from then on.
pub fn float_counter(name: &'static str, labels: &[(&str, &str)]) -> Arc<FloatCounter> {
    let labels = render_labels(labels);
    let mut families = families().lock().unwrap_or_else(|e| e.into_inner());
    families
        .entry(name)
        .or_default()
        .entry(labels)
        .or_default()
        .clone()
}

fn render_labels(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", super::escape_label(v)))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// The exposition text of every float counter made so far, each family with the help
/// text `help` gives for its name.
pub fn render(help: impl Fn(&str) -> &'static str) -> String {
    let families = families().lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    for (name, series) in families.iter() {
        let _ = write!(
            out,
            "\n# HELP {name} {}\n# TYPE {name} counter\n",
            help(name)
        );
        for (labels, counter) in series {
            let _ = writeln!(out, "{name}{labels} {}", counter.get());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_grows_and_never_goes_down() {
        let c = FloatCounter::default();
        c.add(0.25);
        c.add(-1.0);
        c.add(f64::NAN);
        assert_eq!(c.get(), 0.25);
        c.advance_to(1.5);
        c.advance_to(1.0);
        assert_eq!(c.get(), 1.5);
    }

    #[test]
    fn counters_render_as_counters_with_their_labels() {
        let a = float_counter("tandem_test_float_total", &[("kind", "a\"b")]);
        a.add(0.5);
        float_counter("tandem_test_float_total", &[]);
        let text = render(|_| "A test counter.");
        assert!(
            text.contains("# TYPE tandem_test_float_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("tandem_test_float_total{kind=\"a\\\"b\"} 0.5\n"),
            "{text}"
        );
        assert!(text.contains("tandem_test_float_total 0\n"), "{text}");
        assert_eq!(text.matches("# HELP tandem_test_float_total").count(), 1);
    }
}
