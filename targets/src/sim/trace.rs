//! Chrome / Perfetto trace (JSON): one track per unit copy and per DMA engine.

use serde_json::json;

/// Trace events collected during a run.
#[derive(Debug, Default)]
pub struct Trace {
    events: Vec<serde_json::Value>,
    tracks: Vec<(u64, String)>,
}

impl Trace {
    /// Names a track (a unit copy).
    pub fn track(&mut self, tid: u64, name: String) {
        if !self.tracks.iter().any(|(t, _)| *t == tid) {
            self.tracks.push((tid, name));
        }
    }

    /// One instruction on a track, from `start` for `dur` cycles (1 cycle is shown as 1 µs).
    pub fn span(&mut self, tid: u64, name: &str, start: u64, dur: u64, args: serde_json::Value) {
        self.events.push(json!({ "name": name, "ph": "X", "ts": start, "dur": dur.max(1), "pid": 0, "tid": tid, "args": args }));
    }

    /// The trace as Chrome trace-event JSON.
    pub fn to_json(&self, machine: &str) -> serde_json::Value {
        let mut events = vec![
            json!({ "name": "process_name", "ph": "M", "pid": 0, "args": { "name": machine } }),
        ];
        for (tid, name) in &self.tracks {
            events.push(json!({ "name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": { "name": name } }));
            events.push(json!({ "name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": { "sort_index": tid } }));
        }
        events.extend(self.events.iter().cloned());
        json!({ "traceEvents": events, "displayTimeUnit": "ns", "otherData": { "time_unit": "1 us = 1 cycle" } })
    }
}
