//! The one diverging scale for an advantage, everywhere credit colours one: figures (plotters),
//! state-graph edges (DOT) and the explorer's cells (the page is given these stops). ColorBrewer's
//! RdBu: blue (negative) through light grey (0) to red (positive), over t ∈ [−1, 1] — a value
//! divided by its method's scale, clamped.

use serde::Serialize;

/// (t, sRGB) stops, linearly interpolated between.
pub const STOPS: [Stop; 5] = [
    Stop(-1.0, [33, 102, 172]),
    Stop(-0.5, [146, 197, 222]),
    Stop(0.0, [232, 232, 232]),
    Stop(0.5, [244, 165, 130]),
    Stop(1.0, [178, 24, 43]),
];

/// A stop of the scale: serialised as `[t, [r, g, b]]` for the explorer's script.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Stop(pub f64, pub [u8; 3]);

/// The colour of `t` (clamped to [−1, 1]; not a number: the middle).
pub fn diverging(t: f64) -> [u8; 3] {
    let t = if t.is_finite() {
        t.clamp(-1.0, 1.0)
    } else {
        0.0
    };
    let k = STOPS
        .windows(2)
        .position(|w| t <= w[1].0)
        .unwrap_or(STOPS.len() - 2);
    let (Stop(t0, a), Stop(t1, b)) = (STOPS[k], STOPS[k + 1]);
    let f = (t - t0) / (t1 - t0);
    [0, 1, 2].map(|j| (a[j] as f64 + f * (b[j] as f64 - a[j] as f64)).round() as u8)
}

/// [`diverging`] as `#rrggbb`.
pub fn hex(t: f64) -> String {
    let [r, g, b] = diverging(t);
    format!("#{r:02x}{g:02x}{b:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_are_met_and_values_clamped() {
        for Stop(t, c) in STOPS {
            assert_eq!(diverging(t), c);
        }
        assert_eq!(diverging(-7.0), STOPS[0].1);
        assert_eq!(diverging(f64::NAN), [232, 232, 232]);
        assert_eq!(hex(1.0), "#b2182b");
        // Halfway between the last two stops.
        assert_eq!(diverging(0.75), [211, 95, 87]);
    }
}
