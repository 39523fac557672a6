//! The renderers of a [`Doc`](crate::doc::Doc): the only places that write markup. Each walks
//! the same sections and blocks; a new block kind is one arm in each.

pub mod html;
pub mod markdown;
pub mod text;
