//! Roofline plots (SVG): the machine's roof — peak multiply-accumulates per
//! cycle, and the home memory's bandwidth times operational intensity — and
//! where the whole model and each region with matrix products land.
//!
//! Both axes are logarithmic: operational intensity in MACs per byte that
//! must cross the home memory, attained MACs per simulated cycle. A point on
//! the roof runs at its bound (efficiency 1); the vertical distance below it
//! is what the code leaves on the table. Regions without multiply-accumulates
//! (element-wise steps, copies, reductions) have no place on these axes and
//! are counted in the caption instead.

use isa_specs::Machine;
use plotters::prelude::*;

/// One point: work, compulsory traffic and simulated cycles.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Its label in the legend.
    pub label: String,
    /// Multiply-accumulates.
    pub macs: u64,
    /// Bytes that must cross the home memory.
    pub home_bytes: u64,
    /// Simulated cycles.
    pub cycles: u64,
}

/// The roofline plot of `model` (its first point) and its regions on `m`, as SVG text.
pub fn svg(title: &str, m: &Machine, model: &Point, regions: &[Point]) -> Result<String, String> {
    let (peak, bw) = compiler::lower::roof(m);
    let (peak, bw) = (peak.max(1) as f64, bw as f64);
    let shown: Vec<&Point> = std::iter::once(model)
        .chain(regions)
        .filter(|p| p.macs > 0 && p.home_bytes > 0 && p.cycles > 0)
        .collect();
    let intensity = |p: &Point| p.macs as f64 / p.home_bytes as f64;
    let attained = |p: &Point| p.macs as f64 / p.cycles as f64;
    let ridge = peak / bw;
    let (mut lo, mut hi) = (ridge / 8.0, ridge * 8.0);
    let mut ylo = peak / 1e3;
    for p in &shown {
        lo = lo.min(intensity(p) / 2.0);
        hi = hi.max(intensity(p) * 2.0);
        ylo = ylo.min(attained(p) / 2.0);
    }
    let ylo = ylo.max(1e-6);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 600)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let skipped = regions.len() + 1 - shown.len();
        let caption = format!(
            "{title} on {} ({skipped} regions without MACs not shown)",
            m.name
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((lo..hi).log_scale(), (ylo..peak * 2.0).log_scale())
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("operational intensity (MACs per home-memory byte)")
            .y_desc("attained MACs per cycle")
            .draw()
            .map_err(e)?;
        let steps = 64;
        let roof_line: Vec<(f64, f64)> = (0..=steps)
            .map(|i| {
                let x = lo * (hi / lo).powf(i as f64 / steps as f64);
                (x, (bw * x).min(peak))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(roof_line, BLACK.stroke_width(2)))
            .map_err(e)?
            .label(format!("roof: {peak} MACs/cycle, {bw} B/cycle"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        for (i, p) in shown.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let at = (intensity(p), attained(p));
            let eff = attained(p) / (bw * intensity(p)).min(peak);
            let label = format!("{} ({:.1}%)", shorten(&p.label, 60), 100.0 * eff);
            let size = if i == 0 && std::ptr::eq(*p, model) {
                8
            } else {
                5
            };
            chart
                .draw_series(std::iter::once(Circle::new(at, size, color.filled())))
                .map_err(e)?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::LowerRight)
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(out)
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let head: String = s.chars().take(n - 1).collect();
        format!("{head}…")
    }
}
