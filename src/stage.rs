//! The stage of the run an error belongs to, when it is not reading the logs: work done inside
//! the streaming callbacks (drawing a graph) would otherwise be reported as "reading the logs".

use std::fmt;

/// Context naming what the program was doing when an error happened, stage first ("drawing the
/// state graph of group `g1` (iteration 3)"). `read_windows` passes an error that carries one on
/// as it is (`err.downcast_ref::<Stage>()` finds it under any later context).
#[derive(Debug)]
pub struct Stage(pub String);

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
