//! The report's figures, drawn with plotters into SVG (inlined in HTML) and PNG (beside the
//! Markdown). Text uses the embedded DejaVu Sans font, registered once, so rendering needs no
//! system fonts.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::sync::Once;

pub type PlotResult = Result<(), String>;

/// One figure of the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Figure {
    /// File stem: `figures/<id>.png`, `.svg`.
    pub id: String,
    pub title: String,
    /// What the figure shows, in plain language.
    pub caption: String,
    #[serde(skip)]
    pub svg: String,
    #[serde(skip)]
    pub section: Section,
}

/// Where a figure goes in `report.html` and `report.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// "Figures": the logs and the methods.
    Figures,
    /// "Progress and segments": SPA's progress and HISR's segments, when the logs carry them.
    ProgressSegments,
    /// "Per-iteration trends", when the logs have iterations.
    Trends,
    /// "Scores against …", with `--against`.
    Against,
}

/// A figure's drawing, for any backend.
pub trait Plot {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> PlotResult;
}

const FONT: &str = "sans-serif";

/// Registers the embedded DejaVu Sans as the `sans-serif` family (CI machines have no fonts).
pub fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// plotters' error as a sentence: without its "backend error: " wrapper, and a layout error
/// said as what it means.
fn err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    match e {
        DrawingAreaErrorKind::BackendError(e) => e.to_string(),
        DrawingAreaErrorKind::LayoutError => "the panels do not fit the figure's size".into(),
        other => other.to_string(),
    }
}

/// A figure: its SVG and, when asked for, its PNG.
pub struct Rendered {
    pub svg: String,
    pub png: Option<Vec<u8>>,
}

/// Draws `plot` as an SVG string and, when `png` is set, PNG bytes: the bitmap is drawn into
/// memory and encoded here, so that writing the file is the caller's, with its own errors.
pub fn render(plot: &impl Plot, png: bool) -> Result<Rendered, String> {
    register_fonts();
    let size = plot.size();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        plot.draw(&root)?;
        root.present().map_err(err)?;
    }
    let png = if png { Some(png_bytes(plot)?) } else { None };
    Ok(Rendered { svg, png })
}

/// `plot` as a PNG file's bytes.
fn png_bytes(plot: &impl Plot) -> Result<Vec<u8>, String> {
    use image::ImageEncoder;
    let (width, height) = plot.size();
    // RGB, 3 bytes a pixel: `BitMapBackend::with_buffer`'s layout.
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        plot.draw(&root)?;
        root.present().map_err(err)?;
    }
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(&pixels, width, height, image::ColorType::Rgb8)
        .map_err(|e| format!("encoding the PNG: {e}"))?;
    Ok(bytes)
}

/// A qualitative palette (Tableau 10), one colour per method or series.
pub fn palette(i: usize) -> RGBColor {
    const P: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = P[i % P.len()];
    RGBColor(r, g, b)
}

/// The advantage scale ([`crate::palette`]) as a plotters colour.
pub fn diverging(t: f64) -> RGBColor {
    let [r, g, b] = crate::palette::diverging(t);
    RGBColor(r, g, b)
}

/// An axis label with at most three decimals and no trailing zeros ("2", "0.25", "100").
fn tick(x: &f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = 0.05 * (hi - lo);
    (lo - pad, hi + pad)
}

/// Histograms of several series sharing one x axis, one panel each (small multiples).
pub struct SmallHistograms<'a> {
    /// (name, values): borrowed, since a report's advantage columns hold every step.
    pub series: Vec<(String, std::borrow::Cow<'a, [f64]>)>,
    pub x_desc: String,
    /// What each bar's height is a share of (steps, trajectories).
    pub y_desc: String,
    pub bins: usize,
}

impl Plot for SmallHistograms<'_> {
    fn size(&self) -> (u32, u32) {
        (900, 60 + 170 * self.series.len().max(1) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> PlotResult {
        // Shared range: the 1st–99th percentile over every series, so outliers do not squash the
        // rest; past a million values, of an even stride through them (an axis needs no more).
        let total: usize = self.series.iter().map(|(_, v)| v.len()).sum();
        let stride = total.div_ceil(1_000_000).max(1);
        let mut all: Vec<f64> = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .step_by(stride)
            .filter(|x| x.is_finite())
            .collect();
        all.sort_by(f64::total_cmp);
        let q = |p: f64| {
            all.get(((all.len().saturating_sub(1)) as f64 * p) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let (lo, hi) = padded(q(0.01), q(0.99));
        let width = (hi - lo) / self.bins as f64;
        let panels = area.split_evenly((self.series.len().max(1), 1));
        for (k, ((name, values), panel)) in self.series.iter().zip(&panels).enumerate() {
            let mut counts = vec![0usize; self.bins];
            for &x in values.iter() {
                let b = (((x - lo) / width).floor().max(0.0) as usize).min(self.bins - 1);
                counts[b] += 1;
            }
            let total = values.len().max(1) as f64;
            let top = counts
                .iter()
                .map(|&c| c as f64 / total)
                .fold(0.0, f64::max)
                .max(1e-9)
                * 1.1;
            let mut chart = ChartBuilder::on(panel)
                .caption(
                    format!(
                        "{name}  (n = {}, outside the range are counted at its ends)",
                        values.len()
                    ),
                    (FONT, 16),
                )
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(lo..hi, 0.0..top)
                .map_err(err)?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(244, 244, 244))
                .x_desc(if k + 1 == self.series.len() {
                    self.x_desc.as_str()
                } else {
                    ""
                })
                .y_desc(self.y_desc.as_str())
                .label_style((FONT, 12))
                .draw()
                .map_err(err)?;
            let colour = palette(k);
            chart
                .draw_series(counts.iter().enumerate().map(|(b, &c)| {
                    let x0 = lo + b as f64 * width;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + width, c as f64 / total)],
                        colour.mix(0.75).filled(),
                    )
                }))
                .map_err(err)?;
        }
        Ok(())
    }
}

/// Scatter plots, one panel each (method against method, predicted against logged return).
pub struct Scatter {
    pub panels: Vec<ScatterPanel>,
}

pub struct ScatterPanel {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub points: Vec<(f64, f64)>,
    /// Both axes over one range with the line y = x, for predictions against their targets.
    pub diagonal: bool,
}

impl Plot for Scatter {
    fn size(&self) -> (u32, u32) {
        let n = self.panels.len().max(1) as u32;
        let cols = n.min(3);
        (340 * cols + 20, 330 * n.div_ceil(cols))
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> PlotResult {
        let n = self.panels.len().max(1);
        let cols = n.min(3);
        let cells = area.split_evenly((n.div_ceil(cols), cols));
        for (p, cell) in self.panels.iter().zip(&cells) {
            let range = |v: &mut dyn Iterator<Item = f64>| {
                let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                    (lo.min(x), hi.max(x))
                });
                padded(lo, hi)
            };
            let ((x0, x1), (y0, y1)) = if p.diagonal {
                let both = range(&mut p.points.iter().flat_map(|&(x, y)| [x, y]));
                (both, both)
            } else {
                (
                    range(&mut p.points.iter().map(|p| p.0)),
                    range(&mut p.points.iter().map(|p| p.1)),
                )
            };
            let mut chart = ChartBuilder::on(cell)
                .caption(p.title.as_str(), (FONT, 15))
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(50)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(err)?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(244, 244, 244))
                .x_desc(p.x_desc.as_str())
                .y_desc(p.y_desc.as_str())
                .label_style((FONT, 11))
                .draw()
                .map_err(err)?;
            if p.diagonal {
                chart
                    .draw_series(LineSeries::new([(x0, x0), (x1, x1)], BLACK.mix(0.5)))
                    .map_err(err)?;
            }
            // At most ~4000 points, evenly strided, so large logs stay readable and small files small.
            // A few points (one per trajectory) are drawn larger and opaque so each one shows.
            let stride = p.points.len().div_ceil(4000).max(1);
            let (radius, alpha) = if p.points.len() <= 200 {
                (4, 0.7)
            } else {
                (2, 0.35)
            };
            chart
                .draw_series(
                    p.points
                        .iter()
                        .step_by(stride)
                        .map(|&xy| Circle::new(xy, radius, palette(0).mix(alpha).filled())),
                )
                .map_err(err)?;
        }
        Ok(())
    }
}

/// One line of a [`LinePanels`] panel: (series name, colour index, points).
pub type Line = (String, usize, Vec<(f64, f64)>);

/// Lines over a shared x, one panel per group of lines (e.g. per method: success and failure).
pub struct LinePanels {
    /// (panel title, lines)
    pub panels: Vec<(String, Vec<Line>)>,
    pub x_desc: String,
    pub y_desc: String,
    pub columns: usize,
    /// Fixed y range, else from the data.
    pub y_range: Option<(f64, f64)>,
    /// Per panel, the values its y can take (a share's [0, 1], a mean |A|'s [0, ∞)): the range
    /// from the data, padded, never reaches past them. Panels past the list's end are unbounded.
    pub y_within: Vec<(f64, f64)>,
    /// x is a count (iterations): ticks at whole numbers only.
    pub x_integer: bool,
}

/// The y range a panel draws: fixed, or the data's padded and kept within `within`.
fn y_extent(points: &[(f64, f64)], fixed: Option<(f64, f64)>, within: (f64, f64)) -> (f64, f64) {
    if let Some(range) = fixed {
        return range;
    }
    let (lo, hi) = padded(
        points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
        points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
    );
    (lo.max(within.0), hi.min(within.1))
}

/// The whole numbers of `x0..x1` to tick, every 1, 2, 5, 10, … so that at most 10 show (plotters
/// ticks at multiples of those too, so asking it for this many ticks gives these).
fn integer_ticks(x0: f64, x1: f64) -> Vec<f64> {
    let (first, last) = (x0.ceil() as i64, x1.floor() as i64);
    let span = (last - first).max(0) as f64;
    let every = [1, 2, 5]
        .iter()
        .flat_map(|&m| (0..12).map(move |e| m * 10i64.pow(e)))
        .find(|&k| span / k as f64 <= 9.0)
        .unwrap_or(1);
    (first..=last)
        .filter(|k| k.rem_euclid(every) == 0)
        .map(|k| k as f64)
        .collect()
}

impl Plot for LinePanels {
    fn size(&self) -> (u32, u32) {
        let cols = self.columns.max(1) as u32;
        let rows = (self.panels.len().max(1) as u32).div_ceil(cols);
        (460 * cols, 300 * rows)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> PlotResult {
        let cols = self.columns.max(1);
        let cells = area.split_evenly((self.panels.len().max(1).div_ceil(cols), cols));
        for (k, ((title, lines), cell)) in self.panels.iter().zip(&cells).enumerate() {
            let points: Vec<(f64, f64)> = lines
                .iter()
                .flat_map(|(_, _, p)| p.iter().copied())
                .collect();
            let (x0, x1) = padded(
                points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
                points.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
            );
            let within = self
                .y_within
                .get(k)
                .copied()
                .unwrap_or((f64::NEG_INFINITY, f64::INFINITY));
            let (y0, y1) = y_extent(&points, self.y_range, within);
            // A bounded top cannot be raised to clear the lines for the legend.
            let fixed_top = self.y_range.is_some() || within.1.is_finite();
            let (legend, (y0, y1)) = place_legend(lines, (x0, x1), (y0, y1), fixed_top);
            let mut chart = ChartBuilder::on(cell)
                .caption(title, (FONT, 15))
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(55)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(err)?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(244, 244, 244))
                .x_desc(self.x_desc.as_str())
                .y_desc(self.y_desc.as_str())
                .x_labels(if self.x_integer {
                    integer_ticks(x0, x1).len().max(1)
                } else {
                    10
                })
                .x_label_formatter(&|x| {
                    // Never a tick between two iterations, whatever plotters picks.
                    if self.x_integer && x.fract().abs() > 1e-9 {
                        String::new()
                    } else {
                        tick(x)
                    }
                })
                .label_style((FONT, 11))
                .draw()
                .map_err(err)?;
            for (name, colour, pts) in lines {
                let c = palette(*colour);
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 2, c.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .position(legend)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .label_font((FONT, 12))
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }
}

/// Where a line panel's legend goes: the corner where it covers the fewest points of the lines
/// (sampled along each segment), upper right on ties. When every corner is covered and the y range
/// comes from the data, the top of the range is raised so the legend sits above the lines; the
/// returned y range is the one to draw.
fn place_legend(
    lines: &[Line],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    y_fixed: bool,
) -> (SeriesLabelPosition, (f64, f64)) {
    // The legend's extent as a share of the plot: a fixed width, a row per line.
    let (width, height) = (0.4, 0.1 + 0.08 * lines.len() as f64);
    let samples: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|(_, _, pts)| {
            let along = pts.windows(2).flat_map(|w| {
                (0..10).map(move |k| {
                    let t = k as f64 / 10.0;
                    (
                        w[0].0 + t * (w[1].0 - w[0].0),
                        w[0].1 + t * (w[1].1 - w[0].1),
                    )
                })
            });
            along.chain(pts.last().copied())
        })
        .map(|(x, y)| ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0)))
        .collect();
    let covered = |right: bool, upper: bool| {
        samples
            .iter()
            .filter(|(x, y)| {
                (if right {
                    *x >= 1.0 - width
                } else {
                    *x <= width
                }) && (if upper {
                    *y >= 1.0 - height
                } else {
                    *y <= height
                })
            })
            .count()
    };
    let (corner, n) = [
        (SeriesLabelPosition::UpperRight, covered(true, true)),
        (SeriesLabelPosition::UpperLeft, covered(false, true)),
        (SeriesLabelPosition::LowerRight, covered(true, false)),
        (SeriesLabelPosition::LowerLeft, covered(false, false)),
    ]
    .into_iter()
    .min_by_key(|(_, n)| *n)
    .unwrap_or((SeriesLabelPosition::UpperRight, 0));
    if n > 0 && !y_fixed {
        let raised = y1 + (y1 - y0) * height / (1.0 - height);
        return (SeriesLabelPosition::UpperRight, (y0, raised));
    }
    (corner, (y0, y1))
}

/// (panel title, x axis description, [(category, [values])], series names for stacks or groups)
pub type BarPanel = (String, String, Vec<(String, Vec<f64>)>, Vec<String>);

/// Horizontal bars per category, in one or more panels (e.g. success per task, per iteration); a
/// category with several values gets a stacked bar (shares), or one bar per value when `grouped`.
pub struct BarPanels {
    pub panels: Vec<BarPanel>,
    /// Upper end of the value axis (e.g. 1 for rates, 100 for %), else from the data.
    pub x_max: Option<f64>,
    /// Side by side instead of stacked: one row per (category, series), coloured by series.
    pub grouped: bool,
}

/// One drawn row of a bar panel: its label and its bars as (series, start, length).
type BarRow = (String, Vec<(usize, f64, f64)>);

impl BarPanels {
    fn rows(&self, categories: &[(String, Vec<f64>)], series: &[String]) -> Vec<BarRow> {
        if self.grouped {
            categories
                .iter()
                .flat_map(|(category, values)| {
                    values.iter().enumerate().map(move |(s, &v)| {
                        let name = series.get(s).map_or(String::new(), |n| format!(": {n}"));
                        (format!("{category}{name}"), vec![(s, 0.0, v)])
                    })
                })
                .collect()
        } else {
            categories
                .iter()
                .map(|(category, values)| {
                    let starts = values.iter().scan(0.0, |sum, &v| {
                        *sum += v;
                        Some(*sum - v)
                    });
                    let bars = starts.zip(values).enumerate().map(|(s, (a, &v))| (s, a, v));
                    (category.clone(), bars.collect())
                })
                .collect()
        }
    }

    fn panel_height(rows: usize) -> u32 {
        90 + 26 * rows.max(1) as u32
    }
}

impl Plot for BarPanels {
    fn size(&self) -> (u32, u32) {
        let height: u32 = self
            .panels
            .iter()
            .map(|p| Self::panel_height(self.rows(&p.2, &p.3).len()))
            .sum();
        (900, height + 40)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> PlotResult {
        let mut rest = area.clone();
        for (title, x_desc, categories, series) in &self.panels {
            let rows = self.rows(categories, series);
            let (panel, below) = rest.split_vertically(Self::panel_height(rows.len()));
            rest = below;
            let n = rows.len().max(1) as u32;
            let x_max = self.x_max.unwrap_or_else(|| {
                rows.iter()
                    .flat_map(|(_, bars)| bars.iter().map(|(_, a, v)| a + v))
                    .fold(0.0, f64::max)
                    .max(1e-9)
                    * 1.1
            });
            let labels: Vec<String> = rows
                .iter()
                .map(|(k, _)| k.chars().take(28).collect())
                .collect();
            const COLOUR_NAMES: [&str; 10] = [
                "blue", "orange", "green", "red", "purple", "brown", "pink", "grey", "olive",
                "cyan",
            ];
            let key: Vec<String> = series
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{n} {}", COLOUR_NAMES[i % 10]))
                .collect();
            let caption = if key.is_empty() {
                title.clone()
            } else {
                format!("{title} ({})", key.join(", "))
            };
            // Rows are centred on the integers, first category on top, so each row's label is a tick.
            let mut chart = ChartBuilder::on(&panel)
                .caption(caption, (FONT, 15))
                .margin(8)
                .margin_right(24)
                .x_label_area_size(35)
                .y_label_area_size(190)
                .build_cartesian_2d(0.0..x_max, -0.5..n as f64 - 0.5)
                .map_err(err)?;
            let centre = |i: usize| (n - 1 - i as u32) as f64;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(244, 244, 244))
                .disable_y_mesh()
                .x_desc(x_desc.as_str())
                .x_label_formatter(&tick)
                .y_labels(n as usize)
                .y_label_formatter(&|y| {
                    let row = n as f64 - 1.0 - y;
                    if (row - row.round()).abs() < 1e-6 {
                        labels
                            .get(row.round() as usize)
                            .cloned()
                            .unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .label_style((FONT, 12))
                .draw()
                .map_err(err)?;
            chart
                .draw_series(rows.iter().enumerate().flat_map(|(i, (_, bars))| {
                    let y = centre(i);
                    bars.iter().map(move |&(s, a, v)| {
                        Rectangle::new(
                            [(a, y - 0.35), (a + v, y + 0.35)],
                            palette(s).mix(0.8).filled(),
                        )
                    })
                }))
                .map_err(err)?;
        }
        Ok(())
    }
}

/// A table of coloured cells: rows × columns of values on a diverging scale, each annotated.
pub struct HeatTable {
    pub title: String,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    /// values[row][column]; `None` for an empty cell.
    pub values: Vec<Vec<Option<f64>>>,
    /// A second line per cell (e.g. counts).
    pub notes: Vec<Vec<String>>,
    /// The |value| of the fullest colour: `None` scales each row by its own largest |value|
    /// (methods differ in scale by orders of magnitude), `Some(s)` every cell alike (scores).
    pub scale: Option<f64>,
}

impl Plot for HeatTable {
    fn size(&self) -> (u32, u32) {
        (
            200 + 170 * self.columns.len() as u32,
            120 + 56 * self.rows.len() as u32,
        )
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> PlotResult {
        let title = TextStyle::from((FONT, 17).into_font()).color(&BLACK);
        let label = TextStyle::from((FONT, 13).into_font()).color(&BLACK);
        area.draw(&Text::new(self.title.as_str(), (16, 12), title))
            .map_err(err)?;
        let (x0, y0, cw, ch) = (180i32, 80i32, 170i32, 56i32);
        for (j, c) in self.columns.iter().enumerate() {
            area.draw(&Text::new(
                c.as_str(),
                (x0 + j as i32 * cw + 8, y0 - 24),
                label.clone(),
            ))
            .map_err(err)?;
        }
        for (i, r) in self.rows.iter().enumerate() {
            let y = y0 + i as i32 * ch;
            area.draw(&Text::new(r.as_str(), (16, y + ch / 2 - 8), label.clone()))
                .map_err(err)?;
            let own = || {
                self.values[i]
                    .iter()
                    .flatten()
                    .map(|v| v.abs())
                    .fold(0.0, f64::max)
            };
            let scale = self.scale.unwrap_or_else(own).max(1e-12);
            for (j, v) in self.values[i].iter().enumerate() {
                let x = x0 + j as i32 * cw;
                let fill = v.map_or(RGBColor(250, 250, 250), |v| diverging(v / scale));
                area.draw(&Rectangle::new(
                    [(x, y), (x + cw - 4, y + ch - 4)],
                    fill.filled(),
                ))
                .map_err(err)?;
                let text = v.map_or("—".to_string(), |v| credit_core::wording::signed(v, 3));
                let dark = v.is_some_and(|v| (v / scale).abs() > 0.6);
                let colour = if dark { WHITE } else { BLACK };
                area.draw(&Text::new(
                    text,
                    (x + 10, y + 8),
                    TextStyle::from((FONT, 15).into_font()).color(&colour),
                ))
                .map_err(err)?;
                let note = self
                    .notes
                    .get(i)
                    .and_then(|n| n.get(j))
                    .cloned()
                    .unwrap_or_default();
                area.draw(&Text::new(
                    note,
                    (x + 10, y + 30),
                    TextStyle::from((FONT, 11).into_font()).color(&colour),
                ))
                .map_err(err)?;
            }
        }
        Ok(())
    }
}

/// A figure before it is drawn: where it goes, its file stem, title and caption, and its plot
/// (the SVG, and the PNG's bytes when asked).
pub struct Sketch<'i> {
    pub section: Section,
    pub id: &'static str,
    pub title: String,
    pub caption: String,
    pub plot: Box<dyn Fn(bool) -> Result<Rendered, String> + 'i>,
}

/// A figure catalogue entry's figure (`crate::figures`).
pub fn sketch<'i, P: Plot + 'i>(
    section: Section,
    id: &'static str,
    title: &str,
    caption: String,
    plot: P,
) -> Option<Sketch<'i>> {
    Some(Sketch {
        section,
        id,
        title: title.to_string(),
        caption,
        plot: Box::new(move |png| render(&plot, png)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers written in an SVG's text elements.
    fn numbers_in(svg: &str) -> Vec<f64> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>')?.1.split_once("</text>"))
            .filter_map(|(text, _)| text.trim().parse().ok())
            .collect()
    }

    #[test]
    fn share_axes_stay_on_zero_to_one_and_iterations_are_whole() {
        // A flat success rate near 0, a flat share at 1, over iterations 1–3: before, the axes ran
        // from −0.4 to 0.5 and 0.4 to 1.3, with ticks at 1.5 and 2.5.
        let line = |y: f64| vec![("s".to_string(), 0, vec![(1.0, y), (2.0, y), (3.0, y)])];
        let plot = LinePanels {
            panels: vec![("a".into(), line(0.05)), ("b".into(), line(1.0))],
            x_desc: "iteration".into(),
            y_desc: String::new(),
            columns: 2,
            y_range: None,
            y_within: vec![(0.0, 1.0); 2],
            x_integer: true,
        };
        let svg = render(&plot, false).unwrap().svg;
        let numbers = numbers_in(&svg);
        assert!(numbers.len() > 6, "{numbers:?}");
        for x in numbers {
            let share = (0.0..=1.0).contains(&x);
            let iteration = x.fract() == 0.0 && (1.0..=3.0).contains(&x);
            assert!(
                share || iteration,
                "tick {x} is neither a share nor an iteration"
            );
        }
        assert_eq!(y_extent(&[(1.0, 1.0)], None, (0.0, 1.0)), (0.5, 1.0));
        assert_eq!(y_extent(&[(1.0, 0.0)], None, (0.0, 1.0)), (0.0, 0.5));
    }

    #[test]
    fn integer_ticks_thin_out_on_long_runs() {
        assert_eq!(integer_ticks(0.9, 3.1), [1.0, 2.0, 3.0]);
        assert_eq!(integer_ticks(1.5, 1.9), Vec::<f64>::new());
        let long = integer_ticks(0.0, 100.0);
        assert_eq!(long.first(), Some(&0.0));
        assert!(
            long.len() <= 10 && long.iter().all(|x| x % 10.0 == 0.0),
            "{long:?}"
        );
    }

    #[test]
    fn ticks_drop_trailing_zeros() {
        let ticks: Vec<String> = [0.0, -0.0, 2.0, 0.25, 100.0, 0.1 + 0.2, -1.5]
            .iter()
            .map(tick)
            .collect();
        assert_eq!(ticks, ["0", "0", "2", "0.25", "100", "0.3", "-1.5"]);
    }

    #[test]
    fn bars_stack_or_group() {
        let categories = vec![
            ("a".to_string(), vec![1.0, 2.0]),
            ("b".to_string(), vec![3.0, 4.0]),
        ];
        let series = vec!["x".to_string(), "y".to_string()];
        let panels = |grouped| BarPanels {
            panels: vec![],
            x_max: None,
            grouped,
        };
        assert_eq!(
            panels(false).rows(&categories, &series),
            [
                ("a".to_string(), vec![(0, 0.0, 1.0), (1, 1.0, 2.0)]),
                ("b".to_string(), vec![(0, 0.0, 3.0), (1, 3.0, 4.0)]),
            ]
        );
        assert_eq!(
            panels(true).rows(&categories, &series),
            [
                ("a: x".to_string(), vec![(0, 0.0, 1.0)]),
                ("a: y".to_string(), vec![(1, 0.0, 2.0)]),
                ("b: x".to_string(), vec![(0, 0.0, 3.0)]),
                ("b: y".to_string(), vec![(1, 0.0, 4.0)]),
            ]
        );
    }

    #[test]
    fn legend_goes_where_the_lines_are_not() {
        let line = |name: &str, pts: Vec<(f64, f64)>| (name.to_string(), 0, pts);
        // Rising from the lower left to the upper right: the upper left is free.
        let rising = [line("a", vec![(0.0, 0.0), (10.0, 10.0)])];
        let (corner, range) = place_legend(&rising, (0.0, 10.0), (0.0, 10.0), false);
        assert!(matches!(corner, SeriesLabelPosition::UpperLeft));
        assert_eq!(range, (0.0, 10.0));
        // Flat lines along the top and the bottom cover every corner: the top is raised by the
        // legend's height (2 lines: 0.26 of the plot), so it sits above them.
        let flat = [
            line("top", vec![(0.0, 10.0), (10.0, 10.0)]),
            line("bottom", vec![(0.0, 0.0), (10.0, 0.0)]),
        ];
        let (corner, (lo, hi)) = place_legend(&flat, (0.0, 10.0), (0.0, 10.0), false);
        assert!(matches!(corner, SeriesLabelPosition::UpperRight));
        assert_eq!(lo, 0.0);
        assert!((hi - 10.0 / 0.74).abs() < 1e-9, "{hi}");
        // A fixed range is kept.
        let (_, range) = place_legend(&flat, (0.0, 10.0), (0.0, 10.0), true);
        assert_eq!(range, (0.0, 10.0));
    }
}
