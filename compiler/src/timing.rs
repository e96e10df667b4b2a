//! Wall-clock time per compiler pass (`tessera compile --time-passes`, and
//! the `passes` of `--emit report`).

use std::time::{Duration, Instant};

/// Each pass's name and the time it took, in the order they ran. A pass that
/// runs more than once (a fallback compiling again) adds up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassTimes(pub Vec<(&'static str, Duration)>);

impl PassTimes {
    /// Runs `f`, adding its time to pass `name`.
    pub fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.add(name, start.elapsed());
        out
    }

    /// Adds `d` to pass `name` (appending it when new).
    pub fn add(&mut self, name: &'static str, d: Duration) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => *t += d,
            None => self.0.push((name, d)),
        }
    }

    /// Every pass of `other`, added to these.
    pub fn merge(&mut self, other: &PassTimes) {
        for &(n, d) in &other.0 {
            self.add(n, d);
        }
    }

    /// The sum of all passes.
    pub fn total(&self) -> Duration {
        self.0.iter().map(|(_, d)| *d).sum()
    }

    /// One line per pass: milliseconds and share of the total.
    pub fn table(&self) -> String {
        let total = self.total().as_secs_f64().max(1e-12);
        let mut s = String::new();
        for (n, d) in &self.0 {
            let secs = d.as_secs_f64();
            s.push_str(&format!(
                "{n:<18} {:>9.1} ms {:>5.1}%\n",
                secs * 1e3,
                100.0 * secs / total
            ));
        }
        s.push_str(&format!("{:<18} {:>9.1} ms\n", "total", total * 1e3));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_run_twice_adds_up_and_keeps_its_place() {
        let mut t = PassTimes::default();
        t.add("lower", Duration::from_millis(3));
        t.add("schedule", Duration::from_millis(5));
        t.add("lower", Duration::from_millis(4));
        assert_eq!(
            t.0,
            vec![
                ("lower", Duration::from_millis(7)),
                ("schedule", Duration::from_millis(5))
            ]
        );
        assert_eq!(t.total(), Duration::from_millis(12));
        let table = t.table();
        assert!(
            table.contains("lower") && table.contains("58.3%"),
            "{table}"
        );
        assert_eq!(t.time("encode", || 42), 42);
        assert_eq!(t.0[2].0, "encode");
    }
}
