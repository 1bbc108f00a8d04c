//! Charts of a run (`divgpu plot`, `bench --plot`): line charts drawn with
//! plotters into an RGB bitmap and written as PNG, and the pixel statistics of
//! a PNG that the tests check a chart with.
//!
//! A chart is one or more panels stacked vertically over a shared x axis, a
//! title and a legend strip between them. Series are drawn 2 px wide: plotters
//! fills such lines as polygons, so their inner pixels carry the series'
//! colour exactly (1 px lines are anti-aliased), and a test can count each
//! series by its colour (`PALETTE`). Text goes through ab_glyph with a TrueType
//! file read at run time (Debian's fonts-dejavu-core by default), so neither
//! fontconfig nor freetype is needed.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Write};
use std::sync::Mutex;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::durable::atomic::write_atomically;
use crate::error::{Error, Result};

/// Series colours, in order: saturated and never grey, so no anti-aliased
/// black text or grey grid pixel can take one of them.
pub const PALETTE: [(u8, u8, u8); 8] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (23, 190, 207),
    (140, 86, 75),
    (227, 119, 194),
];

/// The font used when neither the chart nor DIVGPU_FONT names one.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// One line; a NaN in x or y breaks it (e.g. between a run's batches).
pub struct Series {
    pub name: String,
    pub color: (u8, u8, u8),
    pub points: Vec<(f64, f64)>,
}

pub struct Panel {
    pub y_label: String,
    pub series: Vec<Series>,
    /// A logarithmic y axis (values that are not positive are left out).
    pub log_y: bool,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub width: u32,
    pub height: u32,
    pub panels: Vec<Panel>,
    /// About how many x labels (e.g. the number of pairs, for whole numbers);
    /// None: plotters' choice.
    pub x_labels: Option<usize>,
    /// A TrueType file; None: DIVGPU_FONT, else DEFAULT_FONT.
    pub font: Option<String>,
}

/// Where each panel's plotting area lies in the image: x0, y0, x1, y1
/// (inclusive pixel coordinates).
pub type Rect = [i32; 4];

const FONT_FAMILY: &str = "sans-serif";
/// The path of the font registered with plotters (registration is global).
static REGISTERED: Mutex<Option<String>> = Mutex::new(None);

fn ensure_font(font: Option<&str>) -> Result<()> {
    let path = match font {
        Some(p) => p.to_string(),
        None => std::env::var("DIVGPU_FONT").unwrap_or_else(|_| DEFAULT_FONT.to_string()),
    };
    let mut registered = REGISTERED.lock().map_err(|_| Error::Device("font registry poisoned".into()))?;
    if registered.as_deref() == Some(path.as_str()) {
        return Ok(());
    }
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::input(
            &path,
            format!("cannot read the chart font ({e}): install Debian's fonts-dejavu-core or set DIVGPU_FONT to a .ttf file"),
        )
    })?;
    // plotters keeps a &'static reference: the bytes live for the process
    // (one font, registered again only when another path is asked for).
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font(FONT_FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| Error::input(&path, "not a TrueType or OpenType font"))?;
    *registered = Some(path);
    Ok(())
}


/// The range of the finite values of `values`, widened a little (and from
/// zero for y: rates and costs are compared against nothing at all).
fn range(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
        if hi == lo {
            hi = lo + 1.0;
        }
        return (lo, hi + 0.05 * (hi - lo));
    }
    if hi == lo {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

/// The pieces of a series between NaN breaks.
fn segments(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for &(x, y) in points {
        if x.is_finite() && y.is_finite() {
            out.last_mut().map(|s| s.push((x, y)));
        } else if out.last().is_some_and(|s| !s.is_empty()) {
            out.push(Vec::new());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Draws `chart` into an RGB buffer (width × height × 3 bytes) and returns it
/// with each panel's plotting area. `out` names the file in errors.
pub fn render(chart: &Chart, out: &str) -> Result<(Vec<u8>, Vec<Rect>)> {
    let (w, h) = (chart.width, chart.height);
    if !(200..=8000).contains(&w) || !(150..=8000).contains(&h) {
        return Err(Error::Usage(format!("chart size {w}x{h}: width must be 200..8000 and height 150..8000 pixels")));
    }
    if chart.panels.is_empty() {
        return Err(Error::Usage("a chart needs at least one panel".into()));
    }
    ensure_font(chart.font.as_deref())?;
    let mut buf = vec![255u8; w as usize * h as usize * 3];
    let mut rects = Vec::new();
    {
        // A plotters error (a font or backend failure) as one line naming the file.
        macro_rules! drawn {
            ($e:expr) => {
                $e.map_err(|e| Error::input(out, format!("drawing the chart failed: {e}")))?
            };
        }
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        drawn!(root.fill(&WHITE));
        let body = drawn!(root.margin(6, 0, 0, 0).titled(&chart.title, (FONT_FAMILY, 22)));
        // The legend: one entry per distinct name, in order, in its own strip
        // so that a series' colour inside a plotting area is the series alone.
        let mut legend: Vec<(&str, (u8, u8, u8))> = Vec::new();
        for p in &chart.panels {
            for s in &p.series {
                if !s.name.is_empty() && !legend.iter().any(|(n, c)| *n == s.name && *c == s.color) {
                    legend.push((&s.name, s.color));
                }
            }
        }
        // Two columns where the names fit half the width (about 8 px a character).
        let columns = if legend.iter().all(|(n, _)| n.chars().count() * 8 + 130 < w as usize / 2) { 2 } else { 1 };
        let rows = legend.len().div_ceil(columns).max(1) as u32;
        let (strip, charts) = body.split_vertically(rows * 22 + 8);
        let column_width = w as i32 / columns as i32;
        for (i, (name, (r, g, b))) in legend.iter().enumerate() {
            let x = 70 + (i as i32 % columns as i32) * column_width;
            let y = 12 + (i as i32 / columns as i32) * 22;
            let style = RGBColor(*r, *g, *b).stroke_width(4);
            drawn!(strip.draw(&PathElement::new(vec![(x, y), (x + 36, y)], style)));
            drawn!(strip.draw(&Text::new(name.to_string(), (x + 44, y - 8), (FONT_FAMILY, 16))));
        }
        let areas = charts.split_evenly((chart.panels.len(), 1));
        let x_range = range(chart.panels.iter().flat_map(|p| p.series.iter()).flat_map(|s| s.points.iter().map(|p| p.0)), false);
        for (i, (panel, area)) in chart.panels.iter().zip(areas.iter()).enumerate() {
            let last = i + 1 == chart.panels.len();
            let x_label = if last { Some(chart.x_label.as_str()) } else { None };
            let values = || panel.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
            let rect = if panel.log_y {
                let (lo, hi) = log_range(values());
                drawn!(draw_panel(area, x_range, (lo..hi).log_scale(), panel, x_label, chart.x_labels))
            } else {
                let (lo, hi) = range(values(), true);
                drawn!(draw_panel(area, x_range, lo..hi, panel, x_label, chart.x_labels))
            };
            rects.push(rect);
        }
        drawn!(root.present());
    }
    Ok((buf, rects))
}

/// A log axis' range: the positive finite values, widened by a quarter.
fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = range(values.filter(|v| *v > 0.0), false);
    if lo <= 0.0 {
        return (0.1, 10.0);
    }
    (lo / 1.25, hi * 1.25)
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// One panel on `area`: axes, grid, labels and the series, each drawn
/// segment by segment (plotters strokes a whole path as one polygon whose
/// mitred corners spike out at sharp turns; 2-point paths have no corners).
fn draw_panel<'a, Y>(
    area: &Area<'a>,
    x_range: (f64, f64),
    y_range: Y,
    panel: &Panel,
    x_label: Option<&str>,
    x_labels: Option<usize>,
) -> std::result::Result<Rect, Box<dyn std::error::Error + 'a>>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut cc = ChartBuilder::on(area)
        .margin_left(10)
        .margin_right(20)
        .margin_top(8)
        .margin_bottom(4)
        .x_label_area_size(if x_label.is_some() { 46 } else { 24 })
        .y_label_area_size(84)
        .build_cartesian_2d(x_range.0..x_range.1, y_range)?;
    let mut mesh = cc.configure_mesh();
    mesh.y_desc(panel.y_label.as_str())
        .label_style((FONT_FAMILY, 14))
        .axis_desc_style((FONT_FAMILY, 16))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .y_label_formatter(&|v| short_number(*v))
        .x_label_formatter(&|v| short_number(*v));
    if let Some(label) = x_label {
        mesh.x_desc(label);
    }
    if let Some(n) = x_labels {
        mesh.x_labels(n);
    }
    mesh.draw()?;
    for s in &panel.series {
        let (r, g, b) = s.color;
        let style = RGBColor(r, g, b).stroke_width(2);
        for seg in segments(&s.points) {
            if seg.len() == 1 {
                cc.draw_series(std::iter::once(Circle::new(seg[0], 2, style.filled())))?;
            }
            cc.draw_series(seg.windows(2).map(|w| PathElement::new(vec![w[0], w[1]], style)))?;
        }
    }
    let (xs, ys) = cc.plotting_area().get_pixel_range();
    Ok([xs.start, ys.start, xs.end - 1, ys.end - 1])
}

/// Axis numbers without float noise: 1200000 -> 1.2M, 0.25 -> 0.25.
fn short_number(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{}{suffix}", if s == "-0" { "0" } else { s })
}

/// Encodes an RGB buffer as PNG and writes it to `path` atomically.
pub fn write_png(path: &str, width: u32, height: u32, rgb: &[u8]) -> Result<()> {
    write_atomically(path, |w| {
        let mut encoder = png::Encoder::new(&mut *w, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::High);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(rgb)?;
        writer.finish()?;
        w.flush()?;
        Ok(())
    })
}

/// Draws `chart` to the PNG file `out` (atomically); returns each panel's
/// plotting area.
pub fn draw(chart: &Chart, out: &str) -> Result<Vec<Rect>> {
    let (rgb, rects) = render(chart, out)?;
    write_png(out, chart.width, chart.height, &rgb)?;
    Ok(rects)
}

pub struct PixelStats {
    pub width: u32,
    pub height: u32,
    /// Distinct colours inside the rectangle asked for (else the whole image).
    pub distinct: usize,
    /// Pixels of each colour asked for, inside the rectangle.
    pub counts: Vec<u64>,
}

/// Decodes the PNG at `path` (any colour type, 8 or 16 bits) and counts, in
/// `rect` (inclusive; None: the whole image), its distinct colours and the
/// pixels of each of `colors` exactly. Alpha is ignored.
pub fn pixel_stats(path: &str, rect: Option<Rect>, colors: &[(u8, u8, u8)]) -> Result<PixelStats> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut decoder = png::Decoder::new(BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let bad = |e: png::DecodingError| Error::input(path, format!("not a readable PNG: {e}"));
    let mut reader = decoder.read_info().map_err(bad)?;
    let size = reader.output_buffer_size().ok_or_else(|| Error::input(path, "PNG too large to decode"))?;
    let mut data = vec![0u8; size];
    let frame = reader.next_frame(&mut data).map_err(bad)?;
    let (width, height) = (frame.width, frame.height);
    let channels = frame.color_type.samples();
    let line = frame.line_size;
    let [x0, y0, x1, y1] = rect.unwrap_or([0, 0, width as i32 - 1, height as i32 - 1]);
    let (x0, y0) = (x0.max(0) as u32, y0.max(0) as u32);
    let (x1, y1) = (x1.min(width as i32 - 1), y1.min(height as i32 - 1));
    let mut seen = HashSet::new();
    let mut counts = vec![0u64; colors.len()];
    for y in y0 as i64..=y1 as i64 {
        for x in x0 as i64..=x1 as i64 {
            let p = y as usize * line + x as usize * channels;
            let rgb = if channels >= 3 { (data[p], data[p + 1], data[p + 2]) } else { (data[p], data[p], data[p]) };
            seen.insert(rgb);
            for (c, n) in colors.iter().zip(counts.iter_mut()) {
                if *c == rgb {
                    *n += 1;
                }
            }
        }
    }
    Ok(PixelStats { width, height, distinct: seen.len(), counts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_break_at_nan() {
        let s = segments(&[(0.0, 1.0), (1.0, 2.0), (f64::NAN, f64::NAN), (2.0, 3.0), (f64::NAN, 0.0)]);
        assert_eq!(s, vec![vec![(0.0, 1.0), (1.0, 2.0)], vec![(2.0, 3.0)]]);
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(1_200_000.0), "1.2M");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(25_000.0), "25k");
        assert_eq!(short_number(0.0), "0");
    }
}
