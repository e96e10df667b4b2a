//! `tessera targets`: list the shipped machines.

use super::{EXIT_OK, Format};
use clap::Args;
use std::process::ExitCode;

/// Arguments of `tessera targets`.
#[derive(Debug, Args)]
pub struct TargetsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Prints one line (or one JSON object) per shipped machine.
pub fn run(args: &TargetsArgs) -> anyhow::Result<ExitCode> {
    let rows: Vec<serde_json::Value> = targets::all()
        .iter()
        .map(|t| {
            let m = t.machine();
            serde_json::json!({
                "name": m.name,
                "description": m.description,
                "file": t.file,
                "peak_macs_per_cycle": m.peak_macs_per_cycle(),
                "sram_bytes": m.on_chip_bytes(),
                "offchip_bytes_per_cycle": m.off_chip_bandwidth(),
                "clock_mhz": m.clock_mhz.value,
                "instructions": m.instructions.len(),
            })
        })
        .collect();
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Human => {
            println!(
                "{:<16} {:>10} {:>10} {:>12} {:>7}  description",
                "target", "MACs/cyc", "SRAM", "off-chip B/c", "MHz"
            );
            for r in &rows {
                // serde_json values ignore width in `Display`: format numbers as strings first.
                let num = |key: &str| r[key].as_i64().unwrap_or(0).to_string();
                println!(
                    "{:<16} {:>10} {:>10} {:>12} {:>7}  {}",
                    r["name"].as_str().unwrap_or(""),
                    num("peak_macs_per_cycle"),
                    human_bytes(r["sram_bytes"].as_i64().unwrap_or(0)),
                    num("offchip_bytes_per_cycle"),
                    num("clock_mhz"),
                    r["description"].as_str().unwrap_or(""),
                );
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn human_bytes(n: i64) -> String {
    const UNITS: [(&str, i64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    UNITS
        .iter()
        .find(|(_, size)| n >= *size && n % (size / 16).max(1) == 0)
        .map_or_else(
            || format!("{n} B"),
            |(unit, size)| {
                let value = format!("{:.4}", n as f64 / *size as f64);
                format!(
                    "{} {unit}",
                    value.trim_end_matches('0').trim_end_matches('.')
                )
            },
        )
}
